import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/infra/embedded-postgres.js';
import { createTestDatabase } from '../support/database.js';
import { scrape, total } from '../support/metrics.js';
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
