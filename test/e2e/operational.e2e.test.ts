import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/database.js';
import pg from 'pg';
import { pino } from 'pino';
import { eventStoreUrlFor, onEventStoreDB, prepareReadDatabase, testEventStore } from '../support/event-store.js';
import { EventStoreDBStandIn } from '../support/eventstoredb-standin/index.js';
import { CuttableProxy } from '../support/cuttable-proxy.js';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { assertConformsAt } from '../support/openapi-conformance.js';
import { allScopes, expectError, expectOk, jsonHeaders, ok, rawPost, sleep } from './helpers.js';

/**
 * Contract §13 (health and readiness), §11 (a command answers even when the projection lags, and
 * readiness reports it), and the configurable limits of §1 (body size, per-caller rate limit).
 */
describe('operational endpoints and limits', () => {
  let service: TestService;
  const org = 'org_ops';
  const rateLimit = 25;

  beforeAll(async () => {
    service = await startTestService({ env: { BODY_LIMIT_BYTES: '4096', RATE_LIMIT_PER_MINUTE: String(rateLimit) } });
  });
  afterAll(() => service?.close());

  async function get(target: TestService, path: string) {
    const response = await fetch(`${target.url}${path}`);
    return { status: response.status, headers: response.headers, body: (await response.json()) as any };
  }

  describe('/healthz and /readyz', () => {
    it('GET /healthz answers 200 without a token', async () => {
      const health = await get(service, '/healthz');
      expect(health.status).toBe(200);
      expect(health.body).toEqual({ status: 'ok' });
      expect(health.headers.get('x-request-id')).toBeTruthy();
    });

    it('GET /readyz answers 200 when the stores answer and the projection has caught up', async () => {
      const token = await service.token([org], allScopes, 'ready-checker');
      await ok(service, token, 'create_workspace', { organization_id: org, name: 'Ready' });
      const ready = await get(service, '/readyz');
      expect(ready.status).toBe(200);
      expect(ready.body).toEqual({
        status: 'ready',
        checks: { event_store: 'ok', read_database: 'ok', projection: 'caught_up' },
      });
    });

    it('health endpoints are not rate limited and need no token', async () => {
      const statuses = await Promise.all(Array.from({ length: rateLimit + 5 }, async () => (await fetch(`${service.url}/healthz`)).status));
      expect(statuses.every((status) => status === 200)).toBe(true);
      expect((await get(service, '/readyz')).status).toBe(200);
    });
  });

  describe('configured body limit', () => {
    it('accepts a body at BODY_LIMIT_BYTES and answers 413 one byte over', async () => {
      const token = await service.token([org], allScopes, 'body-limit');
      const body = JSON.stringify({ query: 'list_workspaces', params: { page: 1, size: 1 } });
      const at = await rawPost(service, body + ' '.repeat(4096 - body.length), jsonHeaders(token));
      expectOk(at);
      const over = await rawPost(service, body + ' '.repeat(4097 - body.length), jsonHeaders(token));
      expectError(over, 413, 'payload_too_large');
      const attributes = await callApi(service, token, 'create_workspace', {
        organization_id: org,
        name: 'big',
        attributes: { a: 'x'.repeat(5000) },
      });
      expectError(attributes, 413, 'payload_too_large');
    });
  });

  describe('configured rate limit', () => {
    it('answers 429 with Retry-After once a caller exceeds the limit, without affecting other callers', async () => {
      const limited = await service.token([org], allScopes, 'rate-limited-user');
      const sameUserOtherOrg = await service.token(['org_ops_other'], allScopes, 'rate-limited-user');
      const bystander = await service.token([org], allScopes, 'bystander');
      const responses = [];
      for (let i = 0; i < rateLimit; i++) responses.push(await callApi(service, limited, 'list_workspaces', { page: 1, size: 1 }));
      expect(responses.every((response) => response.status === 200)).toBe(true);

      const over = await callApi(service, limited, 'list_workspaces', { page: 1, size: 1 });
      expectError(over, 429, 'rate_limited');
      const retryAfter = Number(over.headers.get('retry-after'));
      expect(Number.isInteger(retryAfter)).toBe(true);
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(60);

      // Per caller (`sub`): another token of the same subject is limited too, another subject is not.
      expectError(await callApi(service, sameUserOtherOrg, 'list_workspaces', { page: 1, size: 1 }), 429, 'rate_limited');
      expectError(await callApi(service, limited, 'create_workspace', { organization_id: org, name: 'x' }), 429, 'rate_limited');
      expectOk(await callApi(service, bystander, 'list_workspaces', { page: 1, size: 1 }));
    });

    it('does not count or limit requests that fail authentication as any caller', async () => {
      for (let i = 0; i < rateLimit + 3; i++) {
        expectError(await callApi(service, 'bad.token.here', 'list_workspaces', { page: 1, size: 1 }), 401, 'unauthenticated');
      }
    });
  });

  describe('an event store replaced or emptied under its read database', () => {
    const closeAfter: (() => Promise<void>)[] = [];
    afterAll(async () => {
      for (const close of closeAfter.reverse()) await close();
    });

    it.skipIf(testEventStore === 'eventstoredb-server')(
      'is not ready while the log ends before the projection’s checkpoint, and says so',
      async () => {
        const first = await startTestService();
        const token = await first.token([org]);
        await ok(first, token, 'create_workspace', { organization_id: org, name: 'Before the store went' });
        await ok(first, token, 'create_workspace', { organization_id: org, name: 'Also before' });
        expect((await get(first, '/readyz')).status).toBe(200);
        await first.close();
        // The same read database, an event store without its events: emptied (PostgreSQL), or a new one (the stand-in).
        let eventStoreUrl: string | undefined;
        if (onEventStoreDB) {
          const emptyStore = await EventStoreDBStandIn.start();
          closeAfter.push(() => emptyStore.stop());
          eventStoreUrl = emptyStore.url;
        } else {
          const pool = new pg.Pool({ connectionString: first.databaseUrl, max: 1 });
          await pool.query('TRUNCATE es_events');
          await pool.end();
        }
        const replaced = await startTestService({ databaseUrl: first.databaseUrl, ...(eventStoreUrl ? { eventStoreUrl } : {}) });
        closeAfter.push(() => replaced.close());
        const notReady = await get(replaced, '/readyz');
        expect(notReady.status).toBe(503);
        expect(notReady.body.checks).toMatchObject({ event_store: 'ok', read_database: 'ok', projection: 'stopped' });
        expect(notReady.body.checks.event_log).toMatch(
          /^the log ends at its start, before the projection's checkpoint \S+: the event store was replaced or emptied under the read database/,
        );
        // A command sent to it anyway is stored and answered (contract §11), and says whether reads will show it:
        // a new EventStoreDB places its events before the checkpoint, where the projection never reads them;
        // PostgreSQL's positions (transaction ids) keep rising, past the checkpoint, and the projection applies it.
        const created = await callApi(replaced, await replaced.token([org]), 'create_workspace', { organization_id: org, name: 'After' });
        const workspace = expectOk(created);
        if (onEventStoreDB) expect(created.headers.get('x-projection-behind')).toBe('true');
        else {
          expect(created.headers.get('x-projection-behind')).toBeNull();
          expect(await ok(replaced, await replaced.token([org]), 'get_workspace', { id: workspace.id })).toMatchObject({ name: 'After' });
        }
      },
    );
  });

  describe('a projection that does not catch up', () => {
    let lagging: TestService | undefined;
    let rescuer: TestService | undefined;
    afterAll(async () => {
      await rescuer?.close();
      await lagging?.close();
    });

    it('still answers commands after PROJECTION_WAIT_MS, reports not ready, and recovers once a projector runs', async () => {
      // A command-only instance on its own database: nobody projects its events.
      lagging = await startTestService({ runProjector: false, env: { PROJECTION_WAIT_MS: '300' } });
      const token = await lagging.token([org]);
      expect((await get(lagging, '/readyz')).status).toBe(200); // nothing to project yet

      const started = performance.now();
      const created = await callApi(lagging, token, 'create_workspace', { organization_id: org, name: 'Durable' });
      const elapsed = performance.now() - started;
      const workspace = expectOk(created);
      expect(workspace).toMatchObject({ organization_id: org, name: 'Durable', description: '', attributes: {} });
      expect(elapsed).toBeGreaterThanOrEqual(250);

      const notReady = await get(lagging, '/readyz');
      expect(notReady.status).toBe(503);
      expect(notReady.body.status).toBe('not_ready');
      expect(notReady.body.checks).toMatchObject({ event_store: 'ok', read_database: 'ok', projection: 'behind' });
      // With its figures (a count, and null while the projection has no rate), which the API document describes.
      expect(notReady.body.checks).toHaveProperty('projection_backlog_events', expect.any(Number));
      expect(notReady.body.checks).toHaveProperty('projection_catch_up_seconds');
      assertConformsAt('/readyz', 503, notReady.body);
      expect((await get(lagging, '/healthz')).status).toBe(200); // alive, just not ready

      // The events are durable: a projector started later applies them and readiness returns.
      rescuer = await startTestService({ databaseUrl: lagging.databaseUrl });
      let status = 0;
      for (let attempt = 0; attempt < 100 && status !== 200; attempt++) {
        status = (await get(lagging, '/readyz')).status;
        if (status !== 200) await sleep(100);
      }
      expect(status).toBe(200);
      expect(await ok(lagging, token, 'get_workspace', { id: workspace.id })).toEqual(workspace);
      expect(await ok(rescuer, token, 'get_workspace', { id: workspace.id })).toEqual(workspace);
    });
  });

  describe('an unreachable database', () => {
    let proxy: CuttableProxy;
    let eventStoreProxy: CuttableProxy | undefined;
    let cut: TestService | undefined;
    afterAll(async () => {
      await proxy?.open().catch(() => undefined);
      await eventStoreProxy?.open().catch(() => undefined);
      await cut?.close();
    });

    /** With events in EventStoreDB, that store sits behind a cuttable proxy of its own. */
    async function proxiedEventStore(databaseUrl: string): Promise<string | undefined> {
      const direct = await eventStoreUrlFor(databaseUrl);
      if (!direct) return undefined;
      const target = new URL(direct);
      eventStoreProxy = new CuttableProxy({ host: target.hostname, port: Number(target.port) });
      await eventStoreProxy.open();
      target.port = String(eventStoreProxy.port);
      return target.toString();
    }

    it('answers 503 unavailable (never 500) while the stores cannot be reached, /readyz 503, /healthz 200, and recovers', async () => {
      const direct = new URL(await prepareReadDatabase(await createTestDatabase()));
      proxy = new CuttableProxy({ host: direct.hostname, port: Number(direct.port) });
      await proxy.open();
      const proxied = new URL(direct);
      proxied.port = String(proxy.port);
      const logLines: Record<string, unknown>[] = [];
      const logger = pino({ level: 'info' }, { write: (line: string) => void logLines.push(JSON.parse(line) as Record<string, unknown>) });
      cut = await startTestService({ databaseUrl: proxied.toString(), eventStoreUrl: await proxiedEventStore(direct.toString()), logger });
      const token = await cut.token([org]);
      const workspace = await ok(cut, token, 'create_workspace', { organization_id: org, name: 'Before the outage' });

      await proxy.cut();
      await eventStoreProxy?.cut();
      const calls = [
        await callApi(cut, token, 'get_workspace', { id: workspace.id }),
        await callApi(cut, token, 'list_workspaces', { page: 1, size: 10 }),
        await callApi(cut, token, 'create_workspace', { organization_id: org, name: 'During the outage' }),
        await callApi(cut, token, 'update_workspace', { id: workspace.id, name: 'During the outage' }),
        await callApi(cut, token, 'create_solution', { workspace_id: workspace.id, name: 'During the outage' }),
      ];
      for (const response of calls) expectError(response, 503, 'unavailable');
      // An outage is the operator's to see, once per request and in one line: a warning naming the cause, not an error with a stack.
      for (const response of calls) {
        const logged = logLines.filter((line) => line.request_id === response.body.error.request_id && (line.level as number) >= 40);
        expect(logged).toEqual([expect.objectContaining({ level: 40, msg: response.body.error.message, cause: expect.any(String) })]);
        expect(logged[0]).not.toHaveProperty('err');
      }
      // Requests that never reach the stores are answered as usual.
      expectError(await callApi(cut, token, 'get_workspace', { id: 'bad' }), 400, 'validation_error');
      expectError(await callApi(cut, undefined, 'get_workspace', { id: workspace.id }), 401, 'unauthenticated');
      const notReady = await get(cut, '/readyz');
      expect(notReady.status).toBe(503);
      expect(notReady.body).toMatchObject({ status: 'not_ready', checks: { event_store: 'unreachable', read_database: 'unreachable' } });
      expect((await get(cut, '/healthz')).status).toBe(200);

      await proxy.open();
      await eventStoreProxy?.open();
      let status = 0;
      for (let attempt = 0; attempt < 100 && status !== 200; attempt++) {
        status = (await get(cut, '/readyz')).status;
        if (status !== 200) await sleep(100);
      }
      expect(status).toBe(200);
      expect(await ok(cut, token, 'get_workspace', { id: workspace.id })).toEqual(workspace);
      expectOk(await callApi(cut, token, 'create_workspace', { organization_id: org, name: 'After the outage' }));
    });
  });
});
