import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService, type TestService } from '../support/service.js';

describe('a workspace and its solution over HTTP', () => {
  let service: TestService;
  let token: string;

  beforeAll(async () => {
    service = await startTestService();
    token = await service.token(['org_acme']);
  });
  afterAll(() => service?.close());

  it('creates, reads, updates, lists and deletes with a cascade', async () => {
    const created = await callApi(service, token, 'create_workspace', { organization_id: 'org_acme', name: 'Lab' });
    expect(created.status).toBe(200);
    const workspace = created.body.data;
    expect(workspace).toMatchObject({ organization_id: 'org_acme', name: 'Lab', description: '', attributes: {} });
    expect(workspace.created_at).toBe(workspace.updated_at);

    const solution = await callApi(service, token, 'create_solution', { workspace_id: workspace.id, name: 'S1' });
    expect(solution.status).toBe(200);

    const read = await callApi(service, token, 'get_solution', { id: solution.body.data.id });
    expect(read.body.data).toEqual(solution.body.data);

    const deleted = await callApi(service, token, 'delete_workspace', { id: workspace.id });
    expect(deleted.body).toEqual({ data: { id: workspace.id } });

    const afterDelete = await callApi(service, token, 'get_solution', { id: solution.body.data.id });
    expect(afterDelete.status).toBe(404);
    const list = await callApi(service, token, 'list_solutions', { page: 1, size: 10 });
    expect(list.body.data).toEqual({ total: 0, page: 1, size: 10, items: [] });
  });
});
