import { context, isSpanContextValid, SpanKind, SpanStatusCode, trace, type Attributes } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import type { Config } from '../config.js';

/**
 * The service's tracer. Until a provider is registered (startTracing) it is the API's no-op
 * tracer: spans cost a function call, and no context is kept.
 */
export const tracer = trace.getTracer('workspace-solution-api');

/** The W3C `traceparent` header, read from requests. */
export const traceContextPropagator = new W3CTraceContextPropagator();

export type Tracing = { /** Exports the spans still buffered, then stops. */ shutdown: () => Promise<void> };

/**
 * Registers the global tracer provider, with `processor` taking each finished span, and the
 * async-hooks context manager that carries the active span across awaits.
 */
export function startTracing(serviceName: string, processor: SpanProcessor): Tracing {
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: serviceName }),
    spanProcessors: [processor],
  });
  provider.register({ propagator: traceContextPropagator });
  return { shutdown: () => provider.shutdown() };
}

/** Tracing as configured: OTLP/HTTP to the configured endpoint, or none at all (no provider). */
export function startConfiguredTracing(settings: Config['tracing']): Tracing | undefined {
  if (!settings.tracesUrl) return undefined;
  return startTracing(settings.serviceName, new BatchSpanProcessor(new OTLPTraceExporter({ url: settings.tracesUrl })));
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
