import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { expectOk } from './helpers.js';

/**
 * Contract §2: a retry with the same key and request has the effect of one execution and answers
 * what that execution did, whatever happened in between. The stored answer may never have been
 * written (the instance died after the append, or PostgreSQL went away): here it is removed, and
 * the retry must find what was done in the record's own events.
 */
describe('Idempotency-Key: the events are the evidence of what a keyed command did', () => {
  const org = 'org_evidence';
  let service: TestService;
  let token: string;
  let database: pg.Pool;

  beforeAll(async () => {
    service = await startTestService();
    token = await service.token([org]);
    database = new pg.Pool({ connectionString: service.databaseUrl, max: 1 });
  });
  afterAll(async () => {
    await database?.end();
    await service?.close();
  });

  const keyed = (key: string, query: string, params: Record<string, unknown>) =>
    callApi(service, token, query, params, { 'idempotency-key': key });
  const plain = async (query: string, params: Record<string, unknown>) => expectOk(await callApi(service, token, query, params));
  const forgetStoredAnswer = (key: string) => database.query('DELETE FROM idempotency_keys WHERE key = $1', [key]);
  const history = async (kind: 'workspace' | 'solution', id: string) =>
    (await plain(`get_${kind}_history`, { id, page: 1, size: 100 })).items.map((item: { type: string }) => item.type);

  it('create_workspace: the retry answers the same record, created once', async () => {
    const first = expectOk(await keyed('ev-create-ws', 'create_workspace', { organization_id: org, name: 'Once' }));
    await forgetStoredAnswer('ev-create-ws');
    await plain('update_workspace', { id: first.id, name: 'Renamed since' });
    const retry = expectOk(await keyed('ev-create-ws', 'create_workspace', { organization_id: org, name: 'Once' }));
    expect(retry).toEqual(first);
    expect(await history('workspace', first.id)).toEqual(['WorkspaceCreated', 'WorkspaceUpdated']);
  });

  it('update_workspace: the retry answers the first update, and the update is in the history once', async () => {
    const workspace = await plain('create_workspace', { organization_id: org, name: 'Updated once' });
    const first = expectOk(await keyed('ev-update-ws', 'update_workspace', { id: workspace.id, name: 'First', attributes: { n: 1 } }));
    await forgetStoredAnswer('ev-update-ws');
    await plain('update_workspace', { id: workspace.id, name: 'Someone else since' });
    const retry = expectOk(await keyed('ev-update-ws', 'update_workspace', { id: workspace.id, name: 'First', attributes: { n: 1 } }));
    expect(retry).toEqual(first);
    expect(await history('workspace', workspace.id)).toEqual(['WorkspaceCreated', 'WorkspaceUpdated', 'WorkspaceUpdated']);
    expect((await plain('get_workspace', { id: workspace.id })).name).toBe('Someone else since');
  });

  it('delete_workspace: the retry answers the deletion again, not 404', async () => {
    const workspace = await plain('create_workspace', { organization_id: org, name: 'Deleted once' });
    const first = expectOk(await keyed('ev-delete-ws', 'delete_workspace', { id: workspace.id }));
    await forgetStoredAnswer('ev-delete-ws');
    const retry = expectOk(await keyed('ev-delete-ws', 'delete_workspace', { id: workspace.id }));
    expect(retry).toEqual(first);
    expect(await history('workspace', workspace.id)).toEqual(['WorkspaceCreated', 'WorkspaceDeleted']);
  });

  it('create_solution, update_solution and delete_solution likewise', async () => {
    const workspace = await plain('create_workspace', { organization_id: org, name: 'Holds solutions' });
    const created = expectOk(await keyed('ev-create-sol', 'create_solution', { workspace_id: workspace.id, name: 'Sol' }));
    await forgetStoredAnswer('ev-create-sol');
    expect(expectOk(await keyed('ev-create-sol', 'create_solution', { workspace_id: workspace.id, name: 'Sol' }))).toEqual(created);

    const updated = expectOk(await keyed('ev-update-sol', 'update_solution', { id: created.id, name: 'Sol v2' }));
    await forgetStoredAnswer('ev-update-sol');
    await plain('update_solution', { id: created.id, name: 'Sol v3' });
    expect(expectOk(await keyed('ev-update-sol', 'update_solution', { id: created.id, name: 'Sol v2' }))).toEqual(updated);

    const deleted = expectOk(await keyed('ev-delete-sol', 'delete_solution', { id: created.id }));
    await forgetStoredAnswer('ev-delete-sol');
    expect(expectOk(await keyed('ev-delete-sol', 'delete_solution', { id: created.id }))).toEqual(deleted);

    expect(await history('solution', created.id)).toEqual(['SolutionCreated', 'SolutionUpdated', 'SolutionUpdated', 'SolutionDeleted']);
  });

  it('a retry by a caller who has since lost access to the organization is not found, and changes nothing', async () => {
    const workspace = await plain('create_workspace', { organization_id: org, name: 'Access' });
    expectOk(await keyed('ev-access', 'update_workspace', { id: workspace.id, name: 'Secret name' }));
    await forgetStoredAnswer('ev-access');
    const withoutAccess = await service.token([], undefined, 'user-1');
    const retry = await callApi(
      service,
      withoutAccess,
      'update_workspace',
      { id: workspace.id, name: 'Secret name' },
      { 'idempotency-key': 'ev-access' },
    );
    expect(retry.status).toBe(404);
    expect(JSON.stringify(retry.body)).not.toContain('Secret name');
    expect(await history('workspace', workspace.id)).toEqual(['WorkspaceCreated', 'WorkspaceUpdated']);
  });
});
