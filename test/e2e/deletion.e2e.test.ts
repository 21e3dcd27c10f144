import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { expectError, expectOk, expectValidation, ok } from './helpers.js';

/** Contract §10: delete answers, permanence, cascade to solutions, organization_id on create_solution. */
describe('deletion', () => {
  let service: TestService;
  let token: string;
  const org = 'org_del';
  const otherOrg = 'org_del_other';

  beforeAll(async () => {
    service = await startTestService();
    token = await service.token([org, otherOrg]);
  });
  afterAll(() => service?.close());

  const newWorkspace = (organization_id = org) => ok(service, token, 'create_workspace', { organization_id, name: 'W' });
  const newSolution = (workspace_id: string, name = 'S') => ok(service, token, 'create_solution', { workspace_id, name });
  const total = async (query: 'list_workspaces' | 'list_solutions', filter: { organization_id?: string; workspace_id?: string } = {}) =>
    (await ok(service, token, query, { page: 1, size: 100, ...filter })).total;

  describe('delete_solution', () => {
    it('answers exactly {"data": {"id"}} and the solution is gone for get, update, delete and lists', async () => {
      const workspace = await newWorkspace();
      const keep = await newSolution(workspace.id, 'keep');
      const doomed = await newSolution(workspace.id, 'doomed');
      const totalBefore = await total('list_solutions');
      const response = await callApi(service, token, 'delete_solution', { id: doomed.id });
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ data: { id: doomed.id } });

      expectError(await callApi(service, token, 'get_solution', { id: doomed.id }), 404, 'not_found');
      expectError(await callApi(service, token, 'update_solution', { id: doomed.id, name: 'back' }), 404, 'not_found');
      expectError(await callApi(service, token, 'delete_solution', { id: doomed.id }), 404, 'not_found');
      expect(await total('list_solutions')).toBe(totalBefore - 1);
      const inWorkspace = await ok(service, token, 'list_solutions', { page: 1, size: 100, workspace_id: workspace.id });
      expect(inWorkspace.total).toBe(1);
      expect(inWorkspace.items.map((s: any) => s.id)).toEqual([keep.id]);
      // The workspace and its other solution are untouched.
      expect(await ok(service, token, 'get_solution', { id: keep.id })).toEqual(keep);
      expect(await ok(service, token, 'get_workspace', { id: workspace.id })).toEqual(workspace);
    });

    it('reports a deleted solution exactly like one that never existed', async () => {
      const workspace = await newWorkspace();
      const solution = await newSolution(workspace.id);
      await ok(service, token, 'delete_solution', { id: solution.id });
      const deleted = await callApi(service, token, 'get_solution', { id: solution.id });
      const never = await callApi(service, token, 'get_solution', { id: 'sol_neverexisted000000000' });
      expect(deleted.status).toBe(never.status);
      expect(deleted.body.error.code).toBe(never.body.error.code);
      expect(deleted.body.error.message).toBe(never.body.error.message);
    });

    it('lets only one of two concurrent deletes succeed', async () => {
      const workspace = await newWorkspace();
      const solution = await newSolution(workspace.id);
      const responses = await Promise.all([
        callApi(service, token, 'delete_solution', { id: solution.id }),
        callApi(service, token, 'delete_solution', { id: solution.id }),
      ]);
      expect(responses.map((r) => r.status).sort()).toEqual([200, 404]);
    });
  });

  describe('delete_workspace', () => {
    it('answers exactly {"data": {"id"}}; afterwards get, update and delete are 404', async () => {
      const workspace = await newWorkspace();
      const response = await callApi(service, token, 'delete_workspace', { id: workspace.id });
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ data: { id: workspace.id } });
      expectError(await callApi(service, token, 'get_workspace', { id: workspace.id }), 404, 'not_found');
      expectError(await callApi(service, token, 'update_workspace', { id: workspace.id, name: 'Back' }), 404, 'not_found');
      expectError(await callApi(service, token, 'delete_workspace', { id: workspace.id }), 404, 'not_found');
      const deleted = await callApi(service, token, 'get_workspace', { id: workspace.id });
      const never = await callApi(service, token, 'get_workspace', { id: 'ws_neverexisted000000000' });
      expect(deleted.body.error.message).toBe(never.body.error.message);
    });

    it('cascades: its solutions vanish from get, lists and totals at once, other workspaces keep theirs', async () => {
      const doomed = await newWorkspace();
      const survivor = await newWorkspace();
      const doomedSolutions = [];
      for (let i = 0; i < 5; i++) doomedSolutions.push(await newSolution(doomed.id, `doomed ${i}`));
      const survivingSolution = await newSolution(survivor.id, 'survivor');
      const workspacesBefore = await total('list_workspaces');
      const solutionsBefore = await total('list_solutions');
      const orgSolutionsBefore = await total('list_solutions', { organization_id: org });

      expectOk(await callApi(service, token, 'delete_workspace', { id: doomed.id }));

      // Immediately after the answer: no waiting, no polling.
      expect(await total('list_workspaces')).toBe(workspacesBefore - 1);
      expect(await total('list_solutions')).toBe(solutionsBefore - 5);
      expect(await total('list_solutions', { organization_id: org })).toBe(orgSolutionsBefore - 5);
      expect(await ok(service, token, 'list_solutions', { page: 1, size: 100, workspace_id: doomed.id })).toEqual({
        total: 0,
        page: 1,
        size: 100,
        items: [],
      });
      const everything = await ok(service, token, 'list_solutions', { page: 1, size: 100 });
      for (const solution of doomedSolutions) {
        expect(everything.items.map((s: any) => s.id)).not.toContain(solution.id);
        expectError(await callApi(service, token, 'get_solution', { id: solution.id }), 404, 'not_found');
        expectError(await callApi(service, token, 'update_solution', { id: solution.id, name: 'x' }), 404, 'not_found');
        expectError(await callApi(service, token, 'delete_solution', { id: solution.id }), 404, 'not_found');
      }
      const workspaces = await ok(service, token, 'list_workspaces', { page: 1, size: 100 });
      expect(workspaces.items.map((w: any) => w.id)).not.toContain(doomed.id);
      expect(await ok(service, token, 'get_solution', { id: survivingSolution.id })).toEqual(survivingSolution);
      expect(await ok(service, token, 'get_workspace', { id: survivor.id })).toEqual(survivor);
    });

    it("has every solution's own SolutionDeleted in the change feed as soon as it answers (contract §14, §11)", async () => {
      // Three rounds: each has its own race between the answer and the cascade's projection.
      for (let round = 0; round < 3; round++) {
        const doomed = await newWorkspace();
        const solutions = [];
        for (let i = 0; i < 6; i++) solutions.push(await newSolution(doomed.id, `cascaded ${i}`));
        expectOk(await callApi(service, token, 'delete_workspace', { id: doomed.id }));
        const feed = await ok(service, token, 'list_changes', { workspace_id: doomed.id, types: ['SolutionDeleted'], limit: 100 });
        expect(feed.items.map((change: any) => change.solution_id).sort()).toEqual(solutions.map((solution) => solution.id).sort());
      }
    });

    it('makes create_solution in the deleted workspace 404, and creates nothing', async () => {
      const workspace = await newWorkspace();
      await ok(service, token, 'delete_workspace', { id: workspace.id });
      const before = await total('list_solutions');
      expectError(await callApi(service, token, 'create_solution', { workspace_id: workspace.id, name: 'late' }), 404, 'not_found');
      expectError(
        await callApi(service, token, 'create_solution', { workspace_id: workspace.id, organization_id: org, name: 'late' }),
        404,
        'not_found',
      );
      expect(await total('list_solutions')).toBe(before);
    });

    it('deletes an empty workspace and one with many solutions alike', async () => {
      const empty = await newWorkspace();
      expect((await callApi(service, token, 'delete_workspace', { id: empty.id })).body).toEqual({ data: { id: empty.id } });
      const full = await newWorkspace();
      await Promise.all(Array.from({ length: 30 }, (_, i) => newSolution(full.id, `many ${i}`)));
      expect(await total('list_solutions', { workspace_id: full.id })).toBe(30);
      const before = await total('list_solutions');
      expect((await callApi(service, token, 'delete_workspace', { id: full.id })).body).toEqual({ data: { id: full.id } });
      expect(await total('list_solutions')).toBe(before - 30);
    });

    it('keeps lists and totals consistent when solutions are created while their workspace is deleted', async () => {
      const workspace = await newWorkspace();
      await newSolution(workspace.id, 'first');
      const before = await total('list_solutions');
      const creations = Array.from({ length: 8 }, (_, i) =>
        callApi(service, token, 'create_solution', { workspace_id: workspace.id, name: `racing ${i}` }),
      );
      const deletion = callApi(service, token, 'delete_workspace', { id: workspace.id });
      const [deleted, ...created] = await Promise.all([deletion, ...creations]);
      expectOk(deleted);
      for (const response of created) expect([200, 404]).toContain(response.status);
      // Whatever won the race, none of the workspace's solutions remain visible or counted.
      expect(await total('list_solutions', { workspace_id: workspace.id })).toBe(0);
      expect(await total('list_solutions')).toBe(before - 1);
      for (const response of created.filter((r) => r.status === 200)) {
        expectError(await callApi(service, token, 'get_solution', { id: response.body.data.id }), 404, 'not_found');
      }
    });
  });

  describe('create_solution organization_id', () => {
    it('accepts the workspace’s own organization and takes the organization from the workspace', async () => {
      const workspace = await newWorkspace();
      const withOrg = await ok(service, token, 'create_solution', { workspace_id: workspace.id, organization_id: org, name: 'x' });
      expect(withOrg.organization_id).toBe(org);
      expect(withOrg.workspace_id).toBe(workspace.id);
      const withoutOrg = await ok(service, token, 'create_solution', { workspace_id: workspace.id, name: 'y' });
      expect(withoutOrg.organization_id).toBe(org);
    });

    it('rejects an organization_id other than the workspace’s as a validation_error, creating nothing', async () => {
      const workspace = await newWorkspace();
      const before = await total('list_solutions');
      // An organization the caller also has access to, and one it does not have.
      for (const organization_id of [otherOrg, 'org_not_granted']) {
        const response = await callApi(service, token, 'create_solution', { workspace_id: workspace.id, organization_id, name: 'x' });
        expectValidation(response, 'params.organization_id');
      }
      expect(await total('list_solutions')).toBe(before);
    });
  });
});

describe('a solution change whose workspace is deleted while it waits for its projection', () => {
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService({ env: { PROJECTION_WAIT_MS: '1500' } });
  });
  afterAll(() => service?.close());

  it('is answered as done, its event stored (contract §11): the history shows the change, and the solution goes with its workspace', async () => {
    const token = await service.token(['org_del_wait']);
    const workspace = await ok(service, token, 'create_workspace', { organization_id: 'org_del_wait', name: 'W' });
    const solution = await ok(service, token, 'create_solution', { workspace_id: workspace.id, name: 'S' });
    // With the projector away, the update waits out its projection; the workspace is deleted meanwhile.
    await service.runtime.projector.stop();
    const update = callApi(service, token, 'update_solution', { id: solution.id, name: 'T' });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const deletion = callApi(service, token, 'delete_workspace', { id: workspace.id });
    const [updated, deleted] = await Promise.all([update, deletion]);
    expectOk(deleted);
    expectOk(updated);
    expect(updated.body.data).toMatchObject({ id: solution.id, name: 'T' });
    expect(updated.headers.get('x-projection-behind')).toBe('true');
    const history = await ok(service, token, 'get_solution_history', { id: solution.id, page: 1, size: 10 });
    expect(history.items.map((item: { type: string }) => item.type).slice(0, 2)).toEqual(['SolutionCreated', 'SolutionUpdated']);
  });
});
