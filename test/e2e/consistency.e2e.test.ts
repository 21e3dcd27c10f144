import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { allScopes, expectError, expectOk, ok } from './helpers.js';

/**
 * Contract §11: once a command's response is received, every later query from any client and any
 * instance reflects it. Instance A runs the projector; instance B shares its database and only
 * handles requests (it must wait for A's projector before answering its commands).
 */
describe('read-your-writes across instances', () => {
  let a: TestService;
  let b: TestService;
  let tokenA: string; // one client
  let tokenB: string; // another client, same organization
  const org = 'org_consistency';

  beforeAll(async () => {
    a = await startTestService();
    b = await startTestService({ databaseUrl: a.databaseUrl, runProjector: false });
    tokenA = await a.token([org], allScopes, 'client-a');
    tokenB = await b.token([org], allScopes, 'client-b');
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
  });

  it('a workspace created through the command-only instance is readable through the other at once', async () => {
    const created = await ok(b, tokenB, 'create_workspace', { organization_id: org, name: 'Via B', attributes: { v: 1 } });
    expect(await ok(a, tokenA, 'get_workspace', { id: created.id })).toEqual(created);
    expect(await ok(b, tokenB, 'get_workspace', { id: created.id })).toEqual(created);
  });

  it('a workspace created through the projecting instance is readable through the other at once', async () => {
    const created = await ok(a, tokenA, 'create_workspace', { organization_id: org, name: 'Via A' });
    expect(await ok(b, tokenB, 'get_workspace', { id: created.id })).toEqual(created);
  });

  it('every create is counted by the very next list on the other instance', async () => {
    const start = (await ok(a, tokenA, 'list_solutions', { page: 1, size: 1 })).total as number;
    const workspace = await ok(a, tokenA, 'create_workspace', { organization_id: org, name: 'Counter' });
    for (let i = 1; i <= 10; i++) {
      const [writer, writerToken, reader, readerToken] = i % 2 === 0 ? [a, tokenA, b, tokenB] : [b, tokenB, a, tokenA];
      const solution = await ok(writer, writerToken, 'create_solution', { workspace_id: workspace.id, name: `S${i}` });
      const list = await ok(reader, readerToken, 'list_solutions', { page: 1, size: 100, workspace_id: workspace.id });
      expect(list.total).toBe(i);
      expect(list.items.at(-1)).toEqual(solution);
      expect((await ok(reader, readerToken, 'list_solutions', { page: 1, size: 1 })).total).toBe(start + i);
    }
  });

  it('updates through one instance are seen by the next read through the other', async () => {
    const workspace = await ok(a, tokenA, 'create_workspace', { organization_id: org, name: 'Upd' });
    const solution = await ok(a, tokenA, 'create_solution', { workspace_id: workspace.id, name: 'Upd' });
    for (let i = 0; i < 6; i++) {
      const [writer, writerToken, reader, readerToken] = i % 2 === 0 ? [b, tokenB, a, tokenA] : [a, tokenA, b, tokenB];
      const updated = await ok(writer, writerToken, 'update_solution', {
        id: solution.id,
        name: `Upd ${i}`,
        attributes: { [`round${i}`]: i },
        documentation: { blocks: [{ type: 'text', content: `v${i}` }] },
      });
      expect(await ok(reader, readerToken, 'get_solution', { id: solution.id })).toEqual(updated);
      const listed = await ok(reader, readerToken, 'list_solutions', { page: 1, size: 100, workspace_id: workspace.id });
      expect(listed.items).toEqual([updated]);
    }
  });

  it('deletions through one instance are seen by the next read through the other, cascade included', async () => {
    const workspace = await ok(a, tokenA, 'create_workspace', { organization_id: org, name: 'Del' });
    const solutions = [];
    for (let i = 0; i < 3; i++) solutions.push(await ok(a, tokenA, 'create_solution', { workspace_id: workspace.id, name: `D${i}` }));
    await ok(b, tokenB, 'delete_solution', { id: solutions[0]!.id });
    expectError(await callApi(a, tokenA, 'get_solution', { id: solutions[0]!.id }), 404, 'not_found');
    expect((await ok(a, tokenA, 'list_solutions', { page: 1, size: 100, workspace_id: workspace.id })).total).toBe(2);

    const workspacesBefore = (await ok(a, tokenA, 'list_workspaces', { page: 1, size: 1 })).total;
    await ok(b, tokenB, 'delete_workspace', { id: workspace.id });
    expectError(await callApi(a, tokenA, 'get_workspace', { id: workspace.id }), 404, 'not_found');
    expect((await ok(a, tokenA, 'list_workspaces', { page: 1, size: 1 })).total).toBe(workspacesBefore - 1);
    expect((await ok(a, tokenA, 'list_solutions', { page: 1, size: 100, workspace_id: workspace.id })).total).toBe(0);
    for (const solution of solutions) expectError(await callApi(a, tokenA, 'get_solution', { id: solution.id }), 404, 'not_found');
    // Deleted for writers on either instance too.
    expectError(await callApi(a, tokenA, 'create_solution', { workspace_id: workspace.id, name: 'late' }), 404, 'not_found');
    expectError(await callApi(b, tokenB, 'update_workspace', { id: workspace.id, name: 'late' }), 404, 'not_found');
  });

  it('concurrent updates through both instances adding different keys all survive', async () => {
    const workspace = await ok(a, tokenA, 'create_workspace', { organization_id: org, name: 'Both' });
    const responses = await Promise.all(
      Array.from({ length: 10 }, (_, i) => {
        const [instance, token] = i % 2 === 0 ? [a, tokenA] : [b, tokenB];
        return callApi(instance, token, 'update_workspace', { id: workspace.id, name: 'Both', attributes: { [`k${i}`]: i } });
      }),
    );
    for (const response of responses) expectOk(response);
    const expected = Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`k${i}`, i]));
    expect((await ok(a, tokenA, 'get_workspace', { id: workspace.id })).attributes).toEqual(expected);
    expect((await ok(b, tokenB, 'get_workspace', { id: workspace.id })).attributes).toEqual(expected);
  });

  it('orders records created one after the other through either instance by acknowledgment', async () => {
    const listToken = await a.token(['org_consistency_order']);
    const listTokenB = await b.token(['org_consistency_order']);
    const acknowledged: any[] = [];
    for (let i = 0; i < 10; i++) {
      const [instance, token] = i % 2 === 0 ? [a, listToken] : [b, listTokenB];
      acknowledged.push(await ok(instance, token, 'create_workspace', { organization_id: 'org_consistency_order', name: `O${i}` }));
    }
    for (let i = 1; i < acknowledged.length; i++) expect(acknowledged[i].created_at >= acknowledged[i - 1].created_at).toBe(true);
    const listed = await ok(b, listTokenB, 'list_workspaces', { page: 1, size: 100 });
    expect(listed.items).toEqual(acknowledged);
  });
});
