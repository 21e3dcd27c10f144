import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/infra/logger.js';
import type { Tracing } from '../../src/observability/tracing.js';
import { startTracing } from '../../src/observability/tracing-sdk.js';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { eventually } from '../support/stack.js';

const incomingTraceId = '4bf92f3577b34da6a3ce929d0e0e4736';
const incomingSpanId = '00f067aa0ba902b7';

/**
 * Traces as an OTLP collector would get them, taken by an in-memory exporter instead: a span per
 * request under the caller's `traceparent`, the event store and database calls as its children,
 * and the trace id on the request's log lines.
 */
describe('tracing', () => {
  const exporter = new InMemorySpanExporter();
  const logLines: Record<string, unknown>[] = [];
  let tracing: Tracing;
  let service: TestService;
  let token: string;

  beforeAll(async () => {
    tracing = startTracing('workspace-solution-api-test', new SimpleSpanProcessor(exporter));
    const logger = createLogger('info', { write: (line: string) => void logLines.push(JSON.parse(line) as Record<string, unknown>) });
    service = await startTestService({ logger });
    token = await service.token(['org_traced']);
  });
  afterAll(async () => {
    await service?.close();
    await tracing?.shutdown();
  });

  const requestSpan = async (name: string, requestId: string): Promise<ReadableSpan> => {
    let found: ReadableSpan | undefined;
    await eventually(() => {
      found = exporter.getFinishedSpans().find((span) => span.name === name && span.attributes['wsapi.request_id'] === requestId);
      return found !== undefined;
    });
    return found!;
  };
  /** The spans under `parent`, at any depth. */
  const descendantsOf = (parent: ReadableSpan): ReadableSpan[] => {
    const children = exporter.getFinishedSpans().filter((span) => span.parentSpanContext?.spanId === parent.spanContext().spanId);
    return children.flatMap((child) => [child, ...descendantsOf(child)]);
  };

  it('gives a request a span named by its operation, under the incoming traceparent, with the request id', async () => {
    const answer = await callApi(
      service,
      token,
      'create_workspace',
      { organization_id: 'org_traced', name: 'Traced' },
      { traceparent: `00-${incomingTraceId}-${incomingSpanId}-01`, 'x-request-id': 'traced-create', 'idempotency-key': 'traced-create' },
    );
    expect(answer.status).toBe(200);
    const span = await requestSpan('POST /api create_workspace', 'traced-create');
    expect(span.spanContext().traceId).toBe(incomingTraceId);
    expect(span.parentSpanContext?.spanId).toBe(incomingSpanId);
    expect(span.attributes).toMatchObject({
      'wsapi.operation': 'create_workspace',
      'wsapi.request_id': 'traced-create',
      'http.request.method': 'POST',
      'http.route': '/api',
      'http.response.status_code': 200,
    });

    const below = descendantsOf(span);
    const appends = below.filter((child) => child.name === 'event_store append');
    expect(appends).toHaveLength(1);
    expect(appends[0]!.parentSpanContext?.spanId).toBe(span.spanContext().spanId);
    expect(appends[0]!.attributes['wsapi.stream']).toBe(`workspace-${answer.body.data.id}`);
    // The Idempotency-Key is claimed in PostgreSQL, in either event store mode.
    const queries = below.filter((child) => child.name === 'pg query');
    expect(queries.some((query) => String(query.attributes['db.query.text']).includes('idempotency_keys'))).toBe(true);
    for (const child of below) expect(child.spanContext().traceId).toBe(incomingTraceId);
  });

  it('keeps the span active past a body that arrives in many packets', async () => {
    const workspace = await callApi(service, token, 'create_workspace', { organization_id: 'org_traced', name: 'Large' });
    const documentation = { blocks: Array.from({ length: 100 }, () => ({ type: 'text', content: 'x'.repeat(4000) })) };
    const answer = await callApi(
      service,
      token,
      'create_solution',
      { workspace_id: workspace.body.data.id, name: 'Large', documentation },
      { 'x-request-id': 'traced-large' },
    );
    expect(answer.status).toBe(200);
    const span = await requestSpan('POST /api create_solution', 'traced-large');
    expect(descendantsOf(span).map((child) => child.name)).toContain('event_store append');
  });

  it('starts a trace of its own without a traceparent; a query reads the database under it', async () => {
    const created = await callApi(service, token, 'create_workspace', { organization_id: 'org_traced', name: 'Read back' });
    expect((await callApi(service, token, 'get_workspace', { id: created.body.data.id }, { 'x-request-id': 'traced-get' })).status).toBe(
      200,
    );
    const span = await requestSpan('POST /api get_workspace', 'traced-get');
    expect(span.parentSpanContext).toBeUndefined();
    expect(span.spanContext().traceId).not.toBe(incomingTraceId);
    const queries = descendantsOf(span).filter((child) => child.name === 'pg query');
    expect(queries.map((query) => query.parentSpanContext?.spanId)).toContain(span.spanContext().spanId);
  });

  it('writes the trace id on the log lines of a request', async () => {
    const traceId = 'a'.repeat(32);
    expect(
      (
        await fetch(`${service.url}/healthz`, {
          headers: { traceparent: `00-${traceId}-${'b'.repeat(16)}-01`, 'x-request-id': 'traced-log' },
        })
      ).status,
    ).toBe(200);
    await requestSpan('GET /healthz', 'traced-log');
    await eventually(() => logLines.some((line) => line.request_id === 'traced-log'));
    const lines = logLines.filter((line) => line.request_id === 'traced-log');
    expect(lines.map((line) => line.msg)).toEqual(['request']);
    expect(lines[0]).toMatchObject({ trace_id: traceId });
  });
});
