import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordDiff, recordProvenance } from '../../../src/audit/adapters/provenance-reads.js';
import { applyJsonPatch } from '../../support/json-patch.js';
import { startInMemoryApp, type InMemoryApp } from './in-memory-app.js';

/**
 * Provenance and diffs (contract §17) through `app.inject` on the in-memory event store: the
 * parameters' validation, scopes and access, and the answers over a record's real events.
 */
describe('provenance and diffs through the app', () => {
  let started: InMemoryApp;
  let token: string;

  beforeAll(async () => {
    started = await startInMemoryApp({
      queries: {
        provenance: (kind, id, organizations, asOf, pointer) =>
          recordProvenance(started.store, undefined, kind, id, organizations, asOf, pointer),
        diff: (kind, id, organizations, from, to) => recordDiff(started.store, undefined, kind, id, organizations, from, to),
      },
    });
    token = await started.token();
  });
  afterAll(() => started.close());

  const call = (query: string, params: unknown, bearer = token) =>
    started.app.inject({
      method: 'POST',
      url: '/api',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${bearer}` },
      payload: JSON.stringify({ query, params }),
    });
  const data = async (query: string, params: unknown, bearer = token) => {
    const response = await call(query, params, bearer);
    expect(response.statusCode, response.body).toBe(200);
    return response.json().data;
  };
  const refusal = async (query: string, params: unknown, bearer = token) => {
    const response = await call(query, params, bearer);
    const { error } = response.json();
    return { status: response.statusCode, code: error.code, paths: (error.details ?? []).map((detail: { path: string }) => detail.path) };
  };

  const workspaceId = 'ws_000000000000000000001';

  it('given an unknown workspace, answers 404 to both, never a validation error for a well-formed instant', async () => {
    expect(await refusal('get_workspace_provenance', { id: 'ws_nope' })).toMatchObject({ status: 404, code: 'not_found' });
    expect(await refusal('diff_workspace', { id: 'ws_nope', from: '1970-01-01T00:00:00Z' })).toMatchObject({ status: 404 });
  });

  describe('given a workspace created by alice, then changed by bob', () => {
    let created: { created_at: string };
    let updated: { updated_at: string };

    beforeAll(async () => {
      const alice = await started.token({ subject: 'alice' });
      const bob = await started.token({ subject: 'bob' });
      created = await data(
        'create_workspace',
        { organization_id: 'org_unit', name: 'Lab', attributes: { 'a/b': 1, site: { city: 'Oslo' } } },
        alice,
      );
      updated = await data('update_workspace', { id: workspaceId, name: 'Lab', attributes: { site: { city: 'Rome' } } }, bob);
    });

    it('names who set each field', async () => {
      expect(await data('get_workspace_provenance', { id: workspaceId })).toEqual({
        fields: [
          { path: '/name', value: 'Lab', version: 1, set_at: created.created_at, set_by: 'alice' },
          { path: '/description', value: '', version: 1, set_at: created.created_at, set_by: 'alice' },
          { path: '/attributes/a~1b', value: 1, version: 1, set_at: created.created_at, set_by: 'alice' },
          { path: '/attributes/site/city', value: 'Rome', version: 2, set_at: updated.updated_at, set_by: 'bob' },
        ],
      });
      const before = await data('get_workspace_provenance', { id: workspaceId, as_of: created.created_at, path: '/attributes/site' });
      expect(before.fields).toEqual([
        { path: '/attributes/site/city', value: 'Oslo', version: 1, set_at: created.created_at, set_by: 'alice' },
      ]);
    });

    it('diffs from before creation to now: the whole record added, both events listed, the patch giving `to`', async () => {
      const diff = await data('diff_workspace', { id: workspaceId, from: '2000-01-01T00:00:00Z' });
      expect(diff.from).toBeNull();
      expect(diff.patch).toEqual([{ op: 'add', path: '', value: diff.to }]);
      expect(diff.changes.map(({ version, actor }: { version: number; actor: string }) => [version, actor])).toEqual([
        [1, 'alice'],
        [2, 'bob'],
      ]);
      const step = await data('diff_workspace', { id: workspaceId, from: created.created_at, to: updated.updated_at });
      expect(applyJsonPatch(step.from, step.patch)).toEqual(step.to);
      expect(step.changes).toHaveLength(1);
      expect(step.patch).toEqual(
        expect.arrayContaining([
          { op: 'replace', path: '/attributes/site/city', value: 'Rome' },
          expect.objectContaining({ path: '/updated_at' }),
        ]),
      );
    });

    it('diffs back in time when `to` is earlier than `from`: the patch turns the later record into the earlier, and no change lies between', async () => {
      const forward = await data('diff_workspace', { id: workspaceId, from: created.created_at, to: updated.updated_at });
      const back = await data('diff_workspace', { id: workspaceId, from: updated.updated_at, to: created.created_at });
      expect([back.from, back.to]).toEqual([forward.to, forward.from]);
      expect(applyJsonPatch(back.from, back.patch)).toEqual(back.to);
      expect(back.patch).toContainEqual({ op: 'replace', path: '/attributes/site/city', value: 'Oslo' });
      expect(back.changes).toEqual([]);
      const beforeCreation = await data('diff_workspace', { id: workspaceId, from: updated.updated_at, to: '2000-01-01T00:00:00Z' });
      expect(beforeCreation).toEqual({ from: forward.to, to: null, patch: [{ op: 'remove', path: '' }], changes: [] });
    });

    it('is 404 to a caller of another organization, as get_workspace is', async () => {
      const stranger = await started.token({ organizations: ['org_other'] });
      expect(await refusal('get_workspace_provenance', { id: workspaceId }, stranger)).toMatchObject({ status: 404, code: 'not_found' });
      expect(await refusal('diff_workspace', { id: workspaceId, from: created.created_at }, stranger)).toMatchObject({ status: 404 });
    });
  });

  it('refuses a missing scope with 403 before looking at the parameters', async () => {
    const solutionsOnly = await started.token({ scope: 'solutions:read' });
    const workspacesOnly = await started.token({ scope: 'workspaces:read' });
    expect(await refusal('get_workspace_provenance', { id: 'bad' }, solutionsOnly)).toMatchObject({ status: 403, code: 'forbidden' });
    expect(await refusal('diff_workspace', { id: 'bad' }, solutionsOnly)).toMatchObject({ status: 403, code: 'forbidden' });
    expect(await refusal('get_solution_provenance', { id: 'bad' }, workspacesOnly)).toMatchObject({ status: 403, code: 'forbidden' });
    expect(await refusal('diff_solution', { id: 'bad' }, workspacesOnly)).toMatchObject({ status: 403, code: 'forbidden' });
  });

  it.each([
    ['a pointer without its leading slash', { path: 'attributes' }],
    ['a "~" not followed by 0 or 1', { path: '/attributes/a~2' }],
    ['a "~" at the end', { path: '/attributes/a~' }],
    ['a pointer that is not a string', { path: ['attributes'] }],
    ['a malformed as_of', { as_of: '2026-13-01T00:00:00Z' }],
  ])('refuses %s as a validation_error naming the parameter', async (_, params) => {
    const [name] = Object.keys(params);
    expect(await refusal('get_solution_provenance', { id: 'sol_x', ...params })).toEqual({
      status: 400,
      code: 'validation_error',
      paths: [`params.${name}`],
    });
  });

  it.each([
    ['no from', { id: 'ws_x' }, 'params.from'],
    ['a from without its zone', { id: 'ws_x', from: '2026-01-01T00:00:00' }, 'params.from'],
    ['a to that is not an instant', { id: 'ws_x', from: '2026-01-01T00:00:00Z', to: 'now' }, 'params.to'],
    ['an unknown parameter', { id: 'ws_x', from: '2026-01-01T00:00:00Z', as_of: '2026-01-01T00:00:00Z' }, 'params.as_of'],
    ['a solution id', { id: 'sol_x', from: '2026-01-01T00:00:00Z' }, 'params.id'],
  ])('refuses %s to diff_workspace', async (_, params, path) => {
    expect(await refusal('diff_workspace', params)).toEqual({ status: 400, code: 'validation_error', paths: [path] });
  });

  it("diffs a solution back in time across its workspace's deletion: absent at the later instant, whole at the earlier", async () => {
    const workspace = await data('create_workspace', { organization_id: 'org_unit', name: 'Parent' });
    const solution = await data('create_solution', { workspace_id: workspace.id, name: 'Child' });
    await data('delete_workspace', { id: workspace.id });
    // A solution counts as existing only while its workspace does (contract §12), whichever events the cascade appended.
    const forward = await data('diff_solution', { id: solution.id, from: solution.created_at });
    expect([forward.from, forward.to]).toEqual([solution, null]);
    const deletedAt = (await data('diff_workspace', { id: workspace.id, from: workspace.created_at })).changes.at(-1).occurred_at;
    const back = await data('diff_solution', { id: solution.id, from: deletedAt, to: solution.created_at });
    expect(back).toEqual({ from: null, to: solution, patch: [{ op: 'add', path: '', value: solution }], changes: [] });
  });

  it('takes from and to in any offset, and equal instants give an empty patch', async () => {
    const { id, created_at } = await data('create_workspace', { organization_id: 'org_unit', name: 'Offsets' });
    const diff = await data('diff_workspace', { id, from: created_at, to: created_at.replace('Z', '+00:00') });
    expect(diff).toMatchObject({ patch: [], changes: [] });
    expect(diff.from).toEqual(diff.to);
  });
});
