import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { ServiceError, unexpected } from '../errors.js';
import type { Metrics } from './metrics.js';

export type MetricsServer = { url: string; close: () => Promise<void> };

/** From the API, what every answer of the contract carries (§1, §2): passed in, since observability sits below the API. */
export type MetricsServerOptions = {
  port: number;
  host: string;
  /** The answer's request id: a valid incoming `x-request-id`, else a new one. */
  requestIdOf: (incoming: string | string[] | undefined) => string;
  /** The contract's error body. */
  errorBody: (error: ServiceError, requestId: string) => unknown;
  /** Answers with that body what Node's HTTP layer refuses before any handler (malformed, headers too large). */
  answerHttpEdges: (server: Server, log: Logger) => void;
};

/**
 * `GET /metrics` on a listener of its own (METRICS_PORT), so that it can be bound to an internal
 * interface and left out of the ingress. It serves nothing else: other paths get the contract's 404.
 */
export async function startMetricsServer(metrics: Metrics, options: MetricsServerOptions, logger: Logger): Promise<MetricsServer> {
  // A request without a Host header is served rather than refused by Node with an empty 400.
  const server = createServer({ requireHostHeader: false }, (request, response) => {
    const requestId = options.requestIdOf(request.headers['x-request-id']);
    const fail = (status: number, error: ServiceError) =>
      response
        .writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'x-request-id': requestId })
        .end(JSON.stringify(options.errorBody(error, requestId)));
    if ((request.method !== 'GET' && request.method !== 'HEAD') || request.url?.split('?')[0] !== '/metrics') {
      fail(404, new ServiceError('not_found', 'no such endpoint'));
      return;
    }
    // HEAD asks whether the endpoint is there: it is, and a scrape would be work thrown away.
    if (request.method === 'HEAD') {
      response.writeHead(200, { 'content-type': metrics.contentType, 'x-request-id': requestId }).end();
      return;
    }
    metrics.scrape().then(
      (text) => response.writeHead(200, { 'content-type': metrics.contentType, 'x-request-id': requestId }).end(text),
      (error: unknown) => {
        logger.error({ err: error, request_id: requestId }, 'metrics scrape failed');
        fail(500, unexpected());
      },
    );
  });
  options.answerHttpEdges(server, logger);
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
