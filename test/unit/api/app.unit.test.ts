import pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../../src/api/app.js';
import { createTokenVerifier } from '../../../src/api/auth.js';
import { IdempotencyKeys } from '../../../src/api/idempotency.js';
import type { Queries } from '../../../src/api/operations.js';
import { mintToken } from '../../../src/api/tokens.js';
import { workspaceDecider } from '../../../src/domain/deciders.js';
import { InMemoryEventStore } from '../../../src/eventstore/in-memory.js';
import { workspaceStream } from '../../../src/eventstore/stream-names.js';
import { createClock } from '../../../src/infra/clock.js';
import { Metrics } from '../../../src/observability/metrics.js';
import { CascadeWorker } from '../../../src/write/cascade.js';
import { loadState } from '../../../src/write/execute.js';
import { CommandHandlers } from '../../../src/write/handlers.js';

/**
 * The app through `app.inject`, on the in-memory event store: no database, no port. Reads answer
 * from the record's own events here (the read tables are the integration tests' business), so these
 * tests cover the HTTP layer, the error mapping and command handling in milliseconds.
 */
const secret = 'unit-test-secret-that-is-long-enough!!';
const logger = pino({ level: 'silent' });
// Never connected: nothing these tests send needs idempotency keys or the cascade's table.
const unusedPool = new pg.Pool({ connectionString: 'postgresql://unused@127.0.0.1:1/unused' });

describe('the app on the in-memory event store', () => {
  const store = new InMemoryEventStore();
  let app: Awaited<ReturnType<typeof buildApp>>;
  let token: string;
  let newIds = 0;

  beforeAll(async () => {
    const commands = new CommandHandlers({
      store,
      cascade: new CascadeWorker(store, unusedPool, logger),
      clock: createClock(),
      newId: (prefix) => `${prefix}${String(++newIds).padStart(21, '0')}`,
      awaitProjection: async () => undefined,
      projectionWaitMs: 1000,
      logger,
    });
    const getWorkspace: Queries['getWorkspace'] = async (id, organizations) => {
      const { state } = await loadState(store, workspaceStream(id), workspaceDecider);
      return state.status === 'active' && organizations.includes(state.workspace.organization_id) ? state.workspace : undefined;
    };
    app = await buildApp({
      services: {
        verifyToken: createTokenVerifier({ kind: 'secret', secret }),
        idempotency: new IdempotencyKeys(unusedPool, () => undefined),
        commands,
        queries: { getWorkspace } as Queries,
        readiness: async () => ({ ready: true, checks: {} }),
        metrics: new Metrics(),
      },
      logger,
      bodyLimitBytes: 4096,
      rateLimitPerMinute: 0,
      serveMetrics: true,
    });
    token = await mintToken(secret, { subject: 'unit-user', organizations: ['org_unit'] });
  });
  afterAll(async () => {
    await app.close();
    await unusedPool.end();
  });

  const call = (query: string, params: unknown, bearer: string | null = token) =>
    app.inject({
      method: 'POST',
      url: '/api',
      headers: { 'content-type': 'application/json', ...(bearer ? { authorization: `Bearer ${bearer}` } : {}) },
      payload: JSON.stringify({ query, params }),
    });

  it('creates a workspace: the event is in its stream with the caller and request, and the record is answered', async () => {
    const response = await call('create_workspace', { organization_id: 'org_unit', name: 'In memory' });
    expect(response.statusCode).toBe(200);
    const created = response.json().data;
    expect(created).toMatchObject({ organization_id: 'org_unit', name: 'In memory', description: '', attributes: {} });
    const [event] = await store.readStream(workspaceStream(created.id));
    expect(event).toMatchObject({
      type: 'WorkspaceCreated',
      metadata: { actor: 'unit-user', request_id: response.headers['x-request-id'] },
    });
    expect((await call('get_workspace', { id: created.id })).json().data).toEqual(created);
  });

  it('maps a decider’s refusal to the contract: an update of a record that does not exist is 404', async () => {
    const response = await call('update_workspace', { id: `ws_${'n'.repeat(21)}`, name: 'Nobody' });
    expect(response.statusCode).toBe(404);
    expect(response.json().error).toMatchObject({ code: 'not_found', message: 'workspace not found' });
  });

  it('refuses before any store is asked: no token 401, a bad envelope 400, a missing scope 403, bad params 400', async () => {
    const readOnly = await mintToken(secret, { subject: 'unit-user', organizations: ['org_unit'], scope: 'workspaces:read' });
    const before = (await store.readAll({ commit: 0n, prepare: 0n }, 1000)).length;
    expect((await call('create_workspace', { organization_id: 'org_unit', name: 'x' }, null)).statusCode).toBe(401);
    expect(
      (
        await app.inject({
          method: 'POST',
          url: '/api',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
          payload: '[]',
        })
      ).statusCode,
    ).toBe(400);
    expect((await call('create_workspace', { organization_id: 'org_unit', name: 'x' }, readOnly)).json().error.code).toBe('forbidden');
    const invalid = await call('create_workspace', { organization_id: 'org_unit', name: '' });
    expect(invalid.json().error.code).toBe('validation_error');
    expect(invalid.json().error.details.map((detail: { path: string }) => detail.path)).toContain('params.name');
    expect((await store.readAll({ commit: 0n, prepare: 0n }, 1000)).length).toBe(before);
  });
});
