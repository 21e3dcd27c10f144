import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { workspaceDecider } from '../../../src/domain/deciders.js';
import { workspaceStream } from '../../../src/eventstore/stream-names.js';
import { loadState } from '../../../src/write/execute.js';
import { startInMemoryApp, type InMemoryApp } from './in-memory-app.js';

/**
 * The app through `app.inject`, on the in-memory event store: no database, no port. Reads answer
 * from the record's own events here (the read tables are the integration tests' business), so these
 * tests cover the HTTP layer, the error mapping and command handling in milliseconds.
 */
describe('the app on the in-memory event store', () => {
  let started: InMemoryApp;
  let app: InMemoryApp['app'];
  let store: InMemoryApp['store'];
  let token: string;

  beforeAll(async () => {
    started = await startInMemoryApp({
      bodyLimitBytes: 4096,
      queries: {
        getWorkspace: async (id, organizations) => {
          const { state } = await loadState(store, workspaceStream(id), workspaceDecider);
          return state.status === 'active' && organizations.includes(state.workspace.organization_id) ? state.workspace : undefined;
        },
      },
    });
    ({ app, store } = started);
    token = await started.token();
  });
  afterAll(() => started.close());

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
    const readOnly = await started.token({ scope: 'workspaces:read' });
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

describe('an answer to a body of many faults', () => {
  let started: InMemoryApp;
  beforeAll(async () => {
    started = await startInMemoryApp();
  });
  afterAll(() => started.close());

  const post = async (payload: string) =>
    started.app.inject({
      method: 'POST',
      url: '/api',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${await started.token()}` },
      payload,
    });

  it('given more inexact numbers than it names, says there were more than those it lists', async () => {
    const inexact = Array.from({ length: 150 }, (_, index) => `"n${index}": 1.000000000000000001`).join(', ');
    const response = await post(
      `{"query": "create_workspace", "params": {"organization_id": "org_unit", "name": "n", "attributes": {${inexact}}}}`,
    );
    expect(response.statusCode).toBe(400);
    const { error } = response.json();
    expect(error).toMatchObject({ code: 'validation_error', message: 'invalid parameters (the first 100 of more than 100 problems)' });
    expect(error.details).toHaveLength(100);
  });

  it('given an unknown operation of a megabyte, names it back cut short', async () => {
    const response = await post(JSON.stringify({ query: `${'🙂'.repeat(150)}${'x'.repeat(1_000_000)}`, params: {} }));
    expect(response.statusCode).toBe(400);
    const { error } = response.json();
    expect(error).toMatchObject({ code: 'unknown_operation', message: `unknown operation "${'🙂'.repeat(100)}…"` });
  });

  it('lists the first 100 problems, and says how many there were', async () => {
    const unknown = Object.fromEntries(Array.from({ length: 5000 }, (_, index) => [`unknown_${index}`, 1]));
    const response = await post(JSON.stringify({ query: 'list_workspaces', params: { page: 1, size: 1, ...unknown } }));
    expect(response.statusCode).toBe(400);
    const { error } = response.json();
    expect(error).toMatchObject({ code: 'validation_error', message: 'invalid parameters (the first 100 of 5000 problems)' });
    expect(error.details).toHaveLength(100);
    expect(error.details[0]).toEqual({ path: 'params.unknown_0', message: expect.any(String) });
  });

  it('numbers that cannot be stored, thousands of levels deep: an answer of a few kilobytes', async () => {
    const numbers = Array.from({ length: 1000 }, () => '1e400').join(',');
    const payload = `{"query":"list_workspaces","params":{"page":1,"size":1,"x":${'['.repeat(5000)}${numbers}${']'.repeat(5000)}}}`;
    const response = await post(payload);
    expect(response.statusCode).toBe(400);
    expect(response.json().error.code).toBe('validation_error');
    expect(response.body.length).toBeLessThan(32 * 1024);
    const unknownOperation = await post(payload.replace('list_workspaces', 'no_such_operation'));
    expect(unknownOperation.json().error.code).toBe('unknown_operation');
  });
});
