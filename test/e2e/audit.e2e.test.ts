import { createHash, randomUUID } from 'node:crypto';
import { canonicalJson } from '../../src/integrity/hashes.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { solutionStream } from '../../src/eventstore/stream-names.js';
import { fromMicros, toMicros } from '../../src/domain/timestamp.js';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { before } from './helpers.js';

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');
const hexHash = expect.stringMatching(/^[0-9a-f]{64}$/);
const hashes = { hash: hexHash, previous_hash: hexHash, data_hash: hexHash };

describe('audit history and point-in-time reads (contract §12)', () => {
  let service: TestService;
  let alice: string;
  let bob: string;
  let outsider: string;

  beforeAll(async () => {
    service = await startTestService();
    alice = await service.token(['org_audit'], undefined, 'alice');
    bob = await service.token(['org_audit'], undefined, 'bob');
    outsider = await service.token(['org_elsewhere'], undefined, 'mallory');
  });
  afterAll(() => service?.close());

  it('lists a workspace’s events oldest first with version, type, time, actor and data', async () => {
    const created = (await callApi(service, alice, 'create_workspace', { organization_id: 'org_audit', name: 'v1' })).body.data;
    const renamed = (await callApi(service, bob, 'update_workspace', { id: created.id, name: 'v2', attributes: { a: 1 } })).body.data;
    const described = (await callApi(service, alice, 'update_workspace', { id: created.id, name: 'v3', description: 'd' })).body.data;

    const history = await callApi(service, alice, 'get_workspace_history', { id: created.id, page: 1, size: 10 });
    expect(history.status).toBe(200);
    expect(history.body.data).toEqual({
      total: 3,
      page: 1,
      size: 10,
      items: [
        {
          version: 1,
          type: 'WorkspaceCreated',
          occurred_at: created.created_at,
          actor: 'alice',
          data: { id: created.id, organization_id: 'org_audit', name: 'v1', description: '', attributes: {} },
          ...hashes,
        },
        {
          version: 2,
          type: 'WorkspaceUpdated',
          occurred_at: renamed.updated_at,
          actor: 'bob',
          data: { id: created.id, name: 'v2', attributes: { a: 1 } },
          ...hashes,
        },
        {
          version: 3,
          type: 'WorkspaceUpdated',
          occurred_at: described.updated_at,
          actor: 'alice',
          data: { id: created.id, name: 'v3', description: 'd' },
          ...hashes,
        },
      ],
    });
    // Each event's hashes (contract §16): its data's, and the chain from 64 zeros.
    const items = history.body.data.items as { data: unknown; hash: string; previous_hash: string; data_hash: string }[];
    expect(items.map((item) => item.previous_hash)).toEqual(['0'.repeat(64), items[0]!.hash, items[1]!.hash]);
    for (const item of items) expect(item.data_hash).toBe(sha256(canonicalJson(item.data)));

    const secondPage = await callApi(service, alice, 'get_workspace_history', { id: created.id, page: 2, size: 2 });
    expect(secondPage.body.data.total).toBe(3);
    expect(secondPage.body.data.items.map((item: { version: number }) => item.version)).toEqual([3]);

    const asOfFirst = await callApi(service, alice, 'get_workspace', { id: created.id, as_of: created.created_at });
    expect(asOfFirst.body.data).toEqual(created);
    const asOfBetween = await callApi(service, alice, 'get_workspace', { id: created.id, as_of: before(described.updated_at) });
    expect(asOfBetween.body.data).toEqual(renamed);
    const beforeCreation = await callApi(service, alice, 'get_workspace', { id: created.id, as_of: before(created.created_at) });
    expect(beforeCreation.status).toBe(404);
  });

  it('keeps history after deletion and records the cascade in each solution’s history', async () => {
    const workspace = (await callApi(service, alice, 'create_workspace', { organization_id: 'org_audit', name: 'doomed' })).body.data;
    const solution = (await callApi(service, alice, 'create_solution', { workspace_id: workspace.id, name: 'inside' })).body.data;
    const deleted = await callApi(service, bob, 'delete_workspace', { id: workspace.id });
    expect(deleted.status).toBe(200);

    const workspaceHistory = (await callApi(service, alice, 'get_workspace_history', { id: workspace.id, page: 1, size: 10 })).body.data;
    expect(workspaceHistory.items.map((item: { type: string }) => item.type)).toEqual(['WorkspaceCreated', 'WorkspaceDeleted']);
    const deletion = workspaceHistory.items[1];
    expect(deletion.actor).toBe('bob');

    const solutionHistory = (await callApi(service, alice, 'get_solution_history', { id: solution.id, page: 1, size: 10 })).body.data;
    expect(solutionHistory.items.map((item: { type: string }) => item.type)).toEqual(['SolutionCreated', 'SolutionDeleted']);
    expect(solutionHistory.items[1]).toMatchObject({
      version: 2,
      actor: 'bob',
      data: { id: solution.id, workspace_id: workspace.id, reason: 'workspace_deleted' },
    });
    expect(solutionHistory.items[1].occurred_at >= deletion.occurred_at).toBe(true);

    // The deleted records as they were just before their deletion, and gone after it.
    const justBefore = before(deletion.occurred_at);
    expect((await callApi(service, alice, 'get_workspace', { id: workspace.id, as_of: justBefore })).body.data).toEqual(workspace);
    expect((await callApi(service, alice, 'get_solution', { id: solution.id, as_of: justBefore })).body.data).toEqual(solution);
    expect((await callApi(service, alice, 'get_workspace', { id: workspace.id, as_of: deletion.occurred_at })).status).toBe(404);
    expect((await callApi(service, alice, 'get_solution', { id: solution.id, as_of: solutionHistory.items[1].occurred_at })).status).toBe(
      404,
    );
  });

  it('hides history and past states from other organizations, and checks scopes and formats', async () => {
    const workspace = (await callApi(service, alice, 'create_workspace', { organization_id: 'org_audit', name: 'private' })).body.data;
    const solution = (await callApi(service, alice, 'create_solution', { workspace_id: workspace.id, name: 'secret' })).body.data;
    for (const [query, id] of [
      ['get_workspace_history', workspace.id],
      ['get_solution_history', solution.id],
    ]) {
      const answer = await callApi(service, outsider, query!, { id, page: 1, size: 10 });
      expect(answer.status).toBe(404);
      expect(answer.body.error.code).toBe('not_found');
    }
    expect((await callApi(service, outsider, 'get_workspace', { id: workspace.id, as_of: workspace.created_at })).status).toBe(404);
    expect((await callApi(service, outsider, 'get_solution', { id: solution.id, as_of: solution.created_at })).status).toBe(404);
    expect((await callApi(service, alice, 'get_workspace_history', { id: 'ws_neverexisted', page: 1, size: 10 })).status).toBe(404);

    const solutionsOnly = await service.token(['org_audit'], 'solutions:read', 'reader');
    expect((await callApi(service, solutionsOnly, 'get_workspace_history', { id: workspace.id, page: 1, size: 10 })).status).toBe(403);
    expect((await callApi(service, solutionsOnly, 'get_solution_history', { id: solution.id, page: 1, size: 10 })).status).toBe(200);

    // An instant without fractional digits is well-formed since contract §12 was amended (test/e2e/http-edges.e2e.test.ts).
    for (const asOf of ['2026-01-01T00:00:00.0000000Z', '2026-02-30T00:00:00.000000Z', 'yesterday', 5]) {
      const answer = await callApi(service, alice, 'get_workspace', { id: workspace.id, as_of: asOf });
      expect(answer.status).toBe(400);
      expect(answer.body.error.details[0].path).toBe('params.as_of');
    }
    const badPage = await callApi(service, alice, 'get_workspace_history', { id: workspace.id, page: 0, size: 10 });
    expect(badPage.status).toBe(400);
  });

  it('reads a stored version-1 event through the upcaster: history, projection and write side agree', async () => {
    const workspace = (await callApi(service, alice, 'create_workspace', { organization_id: 'org_audit', name: 'legacy' })).body.data;
    const solution = (await callApi(service, alice, 'create_solution', { workspace_id: workspace.id, name: 'old' })).body.data;
    // A SolutionDeleted as version 1 wrote it: no `reason` field.
    const occurredAt = fromMicros(toMicros(solution.updated_at) + 10n);
    const { position } = await service.runtime.store.append(solutionStream(solution.id), 1n, [
      {
        id: randomUUID(),
        type: 'SolutionDeleted',
        data: { id: solution.id, organization_id: 'org_audit', workspace_id: workspace.id },
        metadata: { actor: 'legacy-writer', request_id: 'legacy', occurred_at: occurredAt, schema_version: 1 },
      },
    ]);
    expect(await service.runtime.progress.waitFor(position, 10_000)).toBe(true);

    const history = (await callApi(service, alice, 'get_solution_history', { id: solution.id, page: 1, size: 10 })).body.data;
    expect(history.items[1]).toEqual({
      version: 2,
      type: 'SolutionDeleted',
      occurred_at: occurredAt,
      actor: 'legacy-writer',
      data: { id: solution.id, organization_id: 'org_audit', workspace_id: workspace.id, reason: 'requested' },
      ...hashes,
    });
    // Stored before hashes existed, it gets them computed over its stored form, before upcasting.
    expect(history.items[1].data_hash).toBe(
      sha256(canonicalJson({ id: solution.id, organization_id: 'org_audit', workspace_id: workspace.id })),
    );
    expect(history.items[1].previous_hash).toBe(history.items[0].hash);
    expect((await callApi(service, alice, 'get_solution', { id: solution.id })).status).toBe(404);
    const list = (await callApi(service, alice, 'list_solutions', { page: 1, size: 10, workspace_id: workspace.id })).body.data;
    expect(list.total).toBe(0);
    expect((await callApi(service, alice, 'update_solution', { id: solution.id, name: 'again' })).status).toBe(404);
    expect((await callApi(service, alice, 'delete_solution', { id: solution.id })).status).toBe(404);
  });
});
