import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { scrape, total, type Scrape } from '../support/metrics.js';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { eventually } from '../support/stack.js';
import { expectError, rawPost } from './helpers.js';

/** GET /metrics on the API's port, as Prometheus scrapes it: over HTTP, without a token. */
describe('GET /metrics', () => {
  let service: TestService;
  let token: string;
  const org = 'org_metrics';
  const metricsUrl = () => `${service.url}/metrics`;

  beforeAll(async () => {
    service = await startTestService();
    token = await service.token([org]);
  });
  afterAll(() => service?.close());

  it('is Prometheus text with the prefix, the process metrics, and no token needed', async () => {
    const response = await fetch(metricsUrl());
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const metrics = await scrape(metricsUrl());
    for (const name of metrics.families.keys()) expect(name).toMatch(/^wsapi_/);
    for (const name of [
      'wsapi_process_cpu_user_seconds_total',
      'wsapi_nodejs_heap_size_used_bytes',
      'wsapi_process_resident_memory_bytes',
    ]) {
      expect(metrics.families.has(name), name).toBe(true);
    }
  });

  it('counts requests per operation and status, and the event store appends and projector batches move with them', async () => {
    const before = await scrape(metricsUrl());
    for (let i = 0; i < 3; i++)
      expect((await callApi(service, token, 'create_workspace', { organization_id: org, name: `M${i}` })).status).toBe(200);
    expect((await callApi(service, token, 'list_workspaces', { page: 1, size: 10 })).status).toBe(200);
    const after = await scrape(metricsUrl());

    const moved = (name: string, labels: Record<string, string> = {}) => total(after, name, labels) - total(before, name, labels);
    expect(moved('wsapi_http_requests_total', { operation: 'create_workspace', status: '200' })).toBe(3);
    expect(moved('wsapi_http_requests_total', { operation: 'list_workspaces', status: '200' })).toBe(1);
    expect(moved('wsapi_http_request_duration_seconds_count', { operation: 'create_workspace', status: '200' })).toBe(3);
    // The scrape before counted itself once it was answered.
    expect(moved('wsapi_http_requests_total', { operation: '/metrics', status: '200' })).toBe(1);
    expect(moved('wsapi_event_store_call_duration_seconds_count', { call: 'append', outcome: 'ok' })).toBe(3);
    // A creation without an Idempotency-Key names a new stream: it appends without reading it first.
    expect(moved('wsapi_event_store_call_duration_seconds_count', { call: 'read_stream', outcome: 'ok' })).toBe(0);
    // Each command's wait for its turn on its record is observed, if only to say it took no time.
    expect(moved('wsapi_command_step_duration_seconds_count', { step: 'wait_turn' })).toBe(3);
    expect(moved('wsapi_command_step_duration_seconds_count', { step: 'append' })).toBe(3);
    expect(moved('wsapi_command_step_duration_seconds_count', { step: 'wait_projection' })).toBe(3);
    expect(moved('wsapi_projector_batch_events_count')).toBeGreaterThanOrEqual(1);
    expect(moved('wsapi_projector_batch_events_sum')).toBe(3);
    expect(moved('wsapi_projector_batch_duration_seconds_count')).toBe(moved('wsapi_projector_batch_events_count'));

    expect(total(after, 'wsapi_ready', { check: 'all' })).toBe(1);
    expect(total(after, 'wsapi_ready', { check: 'event_store' })).toBe(1);
    expect(total(after, 'wsapi_ready', { check: 'projection' })).toBe(1);
    expect(total(after, 'wsapi_projection_lag_events')).toBe(0);
    expect(total(after, 'wsapi_projection_lag_seconds')).toBe(0);
    expect(total(after, 'wsapi_cascade_pending_solutions')).toBe(0);
  });

  it('labels unknown operations and paths "unknown", never with what the request said, and unknown paths keep the 404 body', async () => {
    const before = await scrape(metricsUrl());
    expectError(await callApi(service, token, 'drop_everything', {}), 400, 'unknown_operation');
    expectError(await rawPost(service, undefined, {}, '/no-such-path-metrics', 'GET'), 404, 'not_found');
    expectError(await rawPost(service, undefined, {}, '/metrics', 'POST'), 404, 'not_found');
    const after = await scrape(metricsUrl());
    const moved = (labels: Record<string, string>) =>
      total(after, 'wsapi_http_requests_total', labels) - total(before, 'wsapi_http_requests_total', labels);
    expect(moved({ operation: 'unknown', status: '400' })).toBe(1);
    expect(moved({ operation: 'unknown', status: '404' })).toBe(2);
    const labelValues = [...after.series.values()].flatMap((family) =>
      family.metrics.flatMap((sample) => Object.values(sample.labels ?? {})),
    );
    for (const userInput of ['drop_everything', '/no-such-path-metrics']) expect(labelValues).not.toContain(userInput);
  });

  it('counts idempotent replays', async () => {
    const before = await scrape(metricsUrl());
    const keyed = () =>
      callApi(service, token, 'create_workspace', { organization_id: org, name: 'Keyed' }, { 'idempotency-key': 'metrics-replay' });
    expect((await keyed()).status).toBe(200);
    const replay = await keyed();
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    const after = await scrape(metricsUrl());
    const replays = (metrics: Scrape) => total(metrics, 'wsapi_idempotency_replays_total', { operation: 'create_workspace' });
    expect(replays(after) - replays(before)).toBe(1);
  });

  it('counts version conflicts between instances writing one record, and the retries that resolved them', async () => {
    // Inside one instance writers of a record queue and never conflict (contract §7): conflicts come from another instance.
    const other = await startTestService({ databaseUrl: service.databaseUrl, runProjector: false });
    try {
      const created = await callApi(service, token, 'create_workspace', { organization_id: org, name: 'Contended' });
      const id = created.body.data.id as string;
      const both = async () => [await scrape(metricsUrl()), await scrape(`${other.url}/metrics`)];
      const sum = (scrapes: Scrape[], name: string, labels?: Record<string, string>) =>
        scrapes.reduce((sum, scraped) => sum + total(scraped, name, labels), 0);
      const before = await both();
      // Concurrent updates from both instances conflict; the rounds only repeat in the unlikely case that none did.
      let after = before;
      for (
        let round = 0;
        round < 20 && sum(after, 'wsapi_command_conflicts_total') === sum(before, 'wsapi_command_conflicts_total');
        round++
      ) {
        const answers = await Promise.all(
          Array.from({ length: 8 }, (_, i) =>
            callApi(i % 2 ? other : service, token, 'update_workspace', { id, name: `Contended ${round}.${i}` }),
          ),
        );
        for (const answer of answers) expect(answer.status).toBe(200);
        after = await both();
      }
      const conflicts = sum(after, 'wsapi_command_conflicts_total') - sum(before, 'wsapi_command_conflicts_total');
      expect(conflicts).toBeGreaterThan(0);
      // Every update succeeded, so every conflict was retried.
      expect(sum(after, 'wsapi_command_retries_total') - sum(before, 'wsapi_command_retries_total')).toBe(conflicts);
      const conflictAppends = { call: 'append', outcome: 'conflict' };
      expect(
        sum(after, 'wsapi_event_store_call_duration_seconds_count', conflictAppends) -
          sum(before, 'wsapi_event_store_call_duration_seconds_count', conflictAppends),
      ).toBe(conflicts);
    } finally {
      await other.close();
    }
  });

  it('shows the projection lag while no projector runs, and readiness down for it, until one catches up', async () => {
    const idle = await startTestService({ runProjector: false, env: { PROJECTION_WAIT_MS: '50' } });
    try {
      const idleToken = await idle.token([org]);
      for (let i = 0; i < 2; i++)
        expect((await callApi(idle, idleToken, 'create_workspace', { organization_id: org, name: `Lag ${i}` })).status).toBe(200);
      const behind = await scrape(`${idle.url}/metrics`);
      expect(total(behind, 'wsapi_projection_lag_events')).toBe(2);
      expect(total(behind, 'wsapi_projection_lag_seconds')).toBeGreaterThan(0);
      expect(total(behind, 'wsapi_ready', { check: 'projection' })).toBe(0);
      expect(total(behind, 'wsapi_ready', { check: 'all' })).toBe(0);

      idle.runtime.projector.start();
      await eventually(async () => total(await scrape(`${idle.url}/metrics`), 'wsapi_projection_lag_events') === 0);
      const caughtUp = await scrape(`${idle.url}/metrics`);
      expect(total(caughtUp, 'wsapi_projection_lag_seconds')).toBe(0);
      expect(total(caughtUp, 'wsapi_projector_batch_events_sum')).toBe(2);
    } finally {
      await idle.close();
    }
  });
});

describe('GET /metrics while the EventStoreDB node takes connections and never answers', () => {
  const taken = new Set<Socket>();
  const silentNode = createServer((socket) => taken.add(socket));
  let service: TestService;

  beforeAll(async () => {
    await new Promise<void>((resolve) => silentNode.listen(0, '127.0.0.1', resolve));
    const { port } = silentNode.address() as AddressInfo;
    service = await startTestService({ eventStoreUrl: `esdb://127.0.0.1:${port}?tls=false` });
  });
  afterAll(async () => {
    await service?.close();
    for (const socket of taken) socket.destroy();
    await new Promise((resolve) => silentNode.close(resolve));
  });

  it("answers within Prometheus's default scrape timeout (10 s): not ready, the lag and backlog unknown", async () => {
    const started = performance.now();
    const metrics = await scrape(`${service.url}/metrics`);
    // Not a bound on speed: the reads of state have limits of 15 s of their own, which a scrape must not wait out.
    expect(performance.now() - started).toBeLessThan(10_000);
    expect(total(metrics, 'wsapi_ready', { check: 'all' })).toBe(0);
    expect(total(metrics, 'wsapi_projection_lag_events')).toBeNaN();
    expect(total(metrics, 'wsapi_projection_backlog_events')).toBeNaN();
  });
});
