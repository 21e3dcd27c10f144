import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/infra/embedded-postgres.js';
import { createTestDatabase } from '../support/database.js';
import { expectError } from '../e2e/helpers.js';
import { scrape, total } from '../support/metrics.js';
import { rawHttp } from '../support/raw-http.js';
import { startServiceProcess, type ServiceProcess } from '../support/service-process.js';

/** METRICS_PORT: /metrics moves to a listener of its own, which the shutdown closes. */
describe('metrics on their own port', () => {
  let service: ServiceProcess;
  let metricsUrl: string;

  beforeAll(async () => {
    const metricsPort = await freePort();
    metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
    service = await startServiceProcess({ databaseUrl: await createTestDatabase(), env: { METRICS_PORT: String(metricsPort) } });
  });
  afterAll(() => service?.signal('SIGKILL'));

  it('serves /metrics there, counting the API port requests, and nothing else there', async () => {
    expect((await fetch(`${service.url}/healthz`)).status).toBe(200);
    const metrics = await scrape(metricsUrl);
    expect(total(metrics, 'wsapi_http_requests_total', { operation: '/healthz', status: '200' })).toBeGreaterThanOrEqual(1);
    const other = await fetch(metricsUrl.replace('/metrics', '/healthz'));
    expect(other.status).toBe(404);
    const body = (await other.json()) as { error: { code: string; request_id: string } };
    expect(body.error.code).toBe('not_found');
    expect(other.headers.get('x-request-id')).toBe(body.error.request_id);
  });

  it('answers HEAD /metrics as GET without the body, as HTTP asks of every GET resource (RFC 9110 §9.3.2)', async () => {
    const head = await fetch(metricsUrl, { method: 'HEAD' });
    expect([head.status, head.headers.get('content-type'), await head.text()]).toEqual([
      200,
      'text/plain; version=0.0.4; charset=utf-8',
      '',
    ]);
    expect(head.headers.get('x-request-id')).toBeTruthy();
  });

  it('answers with a request id: the caller’s valid one echoed, or a new one', async () => {
    const echoed = await fetch(metricsUrl, { headers: { 'x-request-id': 'scrape-1' } });
    expect([echoed.status, echoed.headers.get('x-request-id')]).toEqual([200, 'scrape-1']);
    expect((await fetch(metricsUrl)).headers.get('x-request-id')).toBeTruthy();
    const other = await fetch(metricsUrl.replace('/metrics', '/other'), { headers: { 'x-request-id': 'other-1' } });
    expect([other.status, other.headers.get('x-request-id')]).toEqual([404, 'other-1']);
  });

  it('refuses what Node’s HTTP layer refuses with the contract’s body and a request id, as the API port does', async () => {
    const listener = { url: metricsUrl };
    expectError(
      await rawHttp(listener, `GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`),
      431,
      'bad_request',
    );
    expectError(await rawHttp(listener, 'THIS IS NOT HTTP\r\n\r\n'), 400, 'bad_request');
    const connect = await rawHttp(listener, 'CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: localhost\r\n\r\n');
    expectError(connect, 404, 'not_found');
  });

  it('leaves the API port without /metrics: the contract 404', async () => {
    const response = await fetch(`${service.url}/metrics`);
    expect(response.status).toBe(404);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe('not_found');
  });

  it('closes the metrics listener on shutdown, and the process exits cleanly', async () => {
    await service.signal('SIGTERM');
    expect(service.child.exitCode, service.output()).toBe(0);
    await expect(fetch(metricsUrl)).rejects.toThrow();
  });
});
