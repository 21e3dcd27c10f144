import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { errorBody } from '../api/errors.js';
import { ServiceError } from '../errors.js';
import type { Metrics } from './metrics.js';

export type MetricsServer = { url: string; close: () => Promise<void> };

/**
 * `GET /metrics` on a listener of its own (METRICS_PORT), so that it can be bound to an internal
 * interface and left out of the ingress. It serves nothing else: other paths get the contract's 404.
 */
export async function startMetricsServer(
  metrics: Metrics,
  address: { port: number; host: string },
  logger: Logger,
): Promise<MetricsServer> {
  const server = createServer((request, response) => {
    if (request.method !== 'GET' || request.url?.split('?')[0] !== '/metrics') {
      const requestId = randomUUID();
      response
        .writeHead(404, { 'content-type': 'application/json; charset=utf-8', 'x-request-id': requestId })
        .end(JSON.stringify(errorBody(new ServiceError('not_found', 'no such endpoint'), requestId)));
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
    server.listen(address.port, address.host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const host = address.host.includes(':') ? `[${address.host}]` : address.host;
  return {
    url: `http://${host}:${port}/metrics`,
    // close() also ends idle keep-alive connections (Node 19+), such as a scraper's.
    close: () => new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve()))),
  };
}
