import { context, defaultTextMapGetter, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Metrics } from './metrics.js';
import { traceContextPropagator, tracer } from './tracing.js';

export type HttpObservationOptions = {
  /** Whether the app also answers `GET /metrics`. */
  serveMetrics: boolean;
  /** Whether a body's `query` names an API operation: the API's table, passed in, since observability sits below the API. */
  isOperationName: (query: string) => boolean;
};

/**
 * What a request is, as a label: the API operation for `POST /api`, the route for the other
 * endpoints, and `unknown` for anything else (an unknown path or operation, a body that was never
 * read). Never a value taken from the request as it is: labels must stay few.
 */
function operationOf(request: FastifyRequest, isOperationName: (query: string) => boolean): string {
  const route = request.routeOptions.url;
  if (route === undefined) return 'unknown';
  if (route !== '/api') return route;
  const query = (request.body as { query?: unknown } | null | undefined)?.query;
  return typeof query === 'string' && isOperationName(query) ? query : 'unknown';
}

const spanName = (request: FastifyRequest, operation: string) =>
  request.routeOptions.url === '/api' ? `${request.method} /api ${operation}` : `${request.method} ${operation}`;

/**
 * Counts and times every request, and, when tracing is on, gives each a span (its parent from an
 * incoming `traceparent`) that is active while the request runs, so that the event store and
 * database calls it makes become its children and its log lines carry its trace id.
 * With `serveMetrics` the app also answers `GET /metrics`.
 */
export function observeHttp(app: FastifyInstance, metrics: Metrics, options: HttpObservationOptions): void {
  const spans = new WeakMap<FastifyRequest, Span>();

  // A callback hook, not an async one: fastify runs the rest of the request (the later hooks, the
  // body parser's continuation, which it binds to this async context, the handler, the answer's
  // hooks) from `done`, so calling it inside `context.with` makes the span active for all of it.
  app.addHook('onRequest', (request, reply, done) => {
    const parent = traceContextPropagator.extract(ROOT_CONTEXT, request.headers, defaultTextMapGetter);
    const span = tracer.startSpan(
      `${request.method} ${request.routeOptions.url ?? 'unknown'}`,
      {
        kind: SpanKind.SERVER,
        attributes: { 'http.request.method': request.method, 'url.path': request.url.split('?')[0], 'wsapi.request_id': request.id },
      },
      parent,
    );
    if (!span.isRecording()) return done();
    spans.set(request, span);
    context.with(trace.setSpan(parent, span), done);
  });

  app.addHook('onResponse', async (request, reply) => {
    const operation = operationOf(request, options.isOperationName);
    const labels = { operation, status: String(reply.statusCode) };
    metrics.requests.inc(labels);
    metrics.requestDuration.observe(labels, reply.elapsedTime / 1000);
    if (reply.getHeader('idempotent-replayed') === 'true') metrics.idempotencyReplays.inc({ operation });
    const span = spans.get(request);
    if (!span) return;
    spans.delete(request);
    span.updateName(spanName(request, operation));
    span.setAttributes({ 'wsapi.operation': operation, 'http.response.status_code': reply.statusCode });
    if (request.routeOptions.url !== undefined) span.setAttribute('http.route', request.routeOptions.url);
    if (reply.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
    span.end();
  });

  app.addHook('onRequestAbort', async (request) => {
    const span = spans.get(request);
    if (!span) return;
    spans.delete(request);
    span.setStatus({ code: SpanStatusCode.ERROR, message: 'the client went away before the answer' });
    span.end();
  });

  if (options.serveMetrics) {
    app.get('/metrics', async (_request, reply) => reply.type(metrics.contentType).send(await metrics.scrape()));
  }
}
