import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/database.js';
import { startServiceProcess } from '../support/service-process.js';

/**
 * OTEL_EXPORTER_OTLP_ENDPOINT as an operator sets it, on the service as `npm start` runs it: the
 * spans reach the collector by OTLP/HTTP, and the ones still buffered at shutdown are sent then.
 */
describe('trace export', () => {
  const received: { path: string; body: string }[] = [];
  let collector: Server;

  beforeAll(async () => {
    collector = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => (body += chunk.toString()));
      request.on('end', () => {
        received.push({ path: request.url ?? '', body });
        response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
  });
  afterAll(() => new Promise<void>((resolve) => collector.close(() => resolve())));

  it('exports the request spans to <endpoint>/v1/traces under OTEL_SERVICE_NAME, flushing them at shutdown', async () => {
    const endpoint = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;
    const service = await startServiceProcess({
      databaseUrl: await createTestDatabase(),
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_SERVICE_NAME: 'wsapi-export-test' },
    });
    const response = await fetch(`${service.url}/readyz`, { headers: { 'x-request-id': 'exported-at-shutdown' } });
    expect(response.status).toBe(200);
    // The batch processor waits seconds before sending; the shutdown must not.
    await service.signal('SIGTERM');
    expect(service.child.exitCode, service.output()).toBe(0);
    const exported = received.filter((request) => request.path === '/v1/traces').map((request) => request.body);
    const withRequest = exported.find((body) => body.includes('exported-at-shutdown'));
    expect(withRequest).toBeDefined();
    expect(withRequest).toContain('GET /readyz');
    expect(withRequest).toContain('wsapi-export-test');
  });
});
