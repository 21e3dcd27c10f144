import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';

/**
 * The OpenTelemetry SDK's part of tracing, loaded only when tracing is on (startConfiguredTracing
 * in ./tracing.ts); the service's spans go through the API alone, a no-op until this registers.
 */

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
  provider.register({ propagator: new W3CTraceContextPropagator() });
  return { shutdown: () => provider.shutdown() };
}

/** Spans exported in batches over OTLP/HTTP to `tracesUrl`. */
export const otlpExport = (tracesUrl: string): SpanProcessor => new BatchSpanProcessor(new OTLPTraceExporter({ url: tracesUrl }));
