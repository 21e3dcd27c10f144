import { context, isSpanContextValid, SpanKind, SpanStatusCode, trace, type Attributes } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { Config } from '../config.js';
import type { Tracing } from './tracing-sdk.js';

/**
 * The service's tracer. Until a provider is registered (startTracing in ./tracing-sdk.ts) it is
 * the API's no-op tracer: spans cost a function call, and no context is kept.
 */
export const tracer = trace.getTracer('workspace-solution-api');

/** The W3C `traceparent` header, read from requests. */
export const traceContextPropagator = new W3CTraceContextPropagator();

export type { Tracing };

/**
 * Tracing as configured: OTLP/HTTP to the configured endpoint, or none at all: no provider, and
 * the SDK not even loaded (./tracing-sdk.ts), which would add a few tenths of a second to every start.
 */
export async function startConfiguredTracing(settings: Config['tracing']): Promise<Tracing | undefined> {
  if (!settings.tracesUrl) return undefined;
  const { startTracing, otlpExport } = await import('./tracing-sdk.js');
  return startTracing(settings.serviceName, otlpExport(settings.tracesUrl));
}

/**
 * Runs `work` in a span that is a child of the active one. Without an active recording span (no
 * request around it, as in the projector's polling, or tracing off) it only runs `work`: a root span
 * per poll would bury the requests' traces.
 */
export async function inChildSpan<T>(name: string, attributes: Attributes, work: () => Promise<T>): Promise<T> {
  if (!trace.getActiveSpan()?.isRecording()) return work();
  const span = tracer.startSpan(name, { kind: SpanKind.CLIENT, attributes });
  try {
    return await context.with(trace.setSpan(context.active(), span), work);
  } catch (error) {
    span.recordException(error as Error);
    span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error).message });
    throw error;
  } finally {
    span.end();
  }
}

/** Log fields naming the active span, so that a log line leads to its trace (pino `mixin`). */
export function activeTraceFields(): { trace_id?: string; span_id?: string } {
  const spanContext = trace.getActiveSpan()?.spanContext();
  if (!spanContext || !isSpanContextValid(spanContext)) return {};
  return { trace_id: spanContext.traceId, span_id: spanContext.spanId };
}
