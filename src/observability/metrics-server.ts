import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { Metrics } from './metrics.js';

export type MetricsServer = { url: string; close: () => Promise<void> };

export type MetricsServerOptions = {
  port: number;
  host: string;
  /** The contract's 404 body, from the API's error mapping: passed in, since observability sits below the API. */
  notFoundBody: (requestId: string) => unknown;
};

/**
 * `GET /metrics` on a listener of its own (METRICS_PORT), so that it can be bound to an internal
 * interface and left out of the ingress. It serves nothing else: other paths get the contract's 404.
 */
export async function startMetricsServer(metrics: Metrics, options: MetricsServerOptions, logger: Logger): Promise<MetricsServer> {
  const server = createServer((request, response) => {
    if (request.method !== 'GET' || request.url?.split('?')[0] !== '/metrics') {
      const requestId = randomUUID();
      response
        .writeHead(404, { 'content-type': 'application/json; charset=utf-8', 'x-request-id': requestId })
        .end(JSON.stringify(options.notFoundBody(requestId)));
      return;
    }
    metrics.scrape().then(
      (text) => response.writeHead(200, { 'content-type': metrics.contentType }).end(text),
      (error: unknown) => {
        logger.error({ err: error }, 'metrics scrape failed');
        response.writeHead(500).end();
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;
  return {
    url: `http://${host}:${port}/metrics`,
    // close() also ends idle keep-alive connections (Node 19+), such as a scraper's.
    close: () => new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve()))),
  };
}
