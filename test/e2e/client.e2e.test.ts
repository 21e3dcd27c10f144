import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError, createClient, type Client } from '../../src/client/index.js';
import { conformingFetch } from '../support/openapi-conformance.js';
import { startTestService, type TestService } from '../support/service.js';
import { allScopes, generatedId } from './helpers.js';

/**
 * A proxy in front of the service that, for its first `losses` connections, passes the request on
 * and then closes the client's connection as the answer starts to come back: the service did the
 * work, the client never hears of it. Later connections pass through.
 */
async function answerLosingProxy(target: string, losses: number) {
  const { port } = new URL(target);
  const idempotencyKeys: string[] = [];
  const sockets = new Set<net.Socket>();
  let connections = 0;
  const server = net.createServer((client) => {
    const losing = connections++ < losses;
    const upstream = net.connect(Number(port), '127.0.0.1');
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    }
    client.on('error', () => undefined);
    upstream.on('error', () => undefined);
    client.on('data', (chunk) => {
      const key = /idempotency-key: *(\S+)/i.exec(chunk.toString('latin1'));
      if (key) idempotencyKeys.push(key[1]!);
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (losing) {
        client.destroy();
        upstream.destroy();
      } else client.write(chunk);
    });
    upstream.on('end', () => client.end());
    client.on('close', () => upstream.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    idempotencyKeys,
    close: () => {
      // Kept-alive connections would hold server.close() open.
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

describe('the typed client against the real service', () => {
  let service: TestService;
  let api: Client;
  const org = 'org_client';

  beforeAll(async () => {
    service = await startTestService();
    api = createClient({ baseUrl: service.url, token: await service.token([org], allScopes), retries: 0, fetch: conformingFetch });
  });
  afterAll(() => service?.close());

  it('calls every operation with one method each', async () => {
    const workspace = await api.createWorkspace({ organization_id: org, name: 'Client', attributes: { team: 'a' } });
    expect(workspace.id).toMatch(generatedId('ws_'));
    expect(await api.getWorkspace({ id: workspace.id })).toEqual(workspace);
    const renamed = await api.updateWorkspace({ id: workspace.id, name: 'Renamed', attributes: { tier: 1 } });
    expect(renamed.attributes).toEqual({ team: 'a', tier: 1 });
    expect((await api.listWorkspaces({ page: 1, size: 10, organization_id: org })).items).toContainEqual(renamed);

    const solution = await api.createSolution({
      workspace_id: workspace.id,
      name: 'S',
      documentation: { blocks: [{ type: 'text', content: 'hi' }] },
    });
    expect(await api.getSolution({ id: solution.id })).toEqual(solution);
    const updated = await api.updateSolution({ id: solution.id, name: 'S2' });
    expect(updated.documentation.blocks[0]?.content).toBe('hi');
    expect((await api.listSolutions({ page: 1, size: 10, workspace_id: workspace.id })).items).toEqual([updated]);
    expect(await api.getSolution({ id: solution.id, as_of: solution.created_at })).toEqual(solution);

    expect(await api.deleteSolution({ id: solution.id })).toEqual({ id: solution.id });
    const solutionHistory = await api.getSolutionHistory({ id: solution.id, page: 1, size: 10 });
    expect(solutionHistory.items.map((item) => item.type)).toEqual(['SolutionCreated', 'SolutionUpdated', 'SolutionDeleted']);
    expect(await api.deleteWorkspace({ id: workspace.id })).toEqual({ id: workspace.id });
    const workspaceHistory = await api.getWorkspaceHistory({ id: workspace.id, page: 1, size: 10 });
    expect(workspaceHistory.items.map((item) => item.type)).toEqual(['WorkspaceCreated', 'WorkspaceUpdated', 'WorkspaceDeleted']);
  });

  it("throws the contract's error as an ApiError with its code, details and request id", async () => {
    const invalid = await api.createWorkspace({ organization_id: org, name: 'x'.repeat(51) }).catch((error: unknown) => error);
    expect(invalid).toBeInstanceOf(ApiError);
    expect(invalid).toMatchObject({ status: 400, code: 'validation_error', details: [{ path: 'params.name' }] });
    expect((invalid as ApiError).requestId).toMatch(/\S/);

    const missing = await api.getWorkspace({ id: 'ws_missing' }, { requestId: 'trace-me-1' }).catch((error: unknown) => error);
    expect(missing).toMatchObject({ status: 404, code: 'not_found', requestId: 'trace-me-1', details: undefined });
  });

  it('iterates over every page and every item of a list', async () => {
    const workspace = await api.createWorkspace({ organization_id: org, name: 'Pages' });
    const created = [];
    for (let i = 0; i < 7; i++) created.push(await api.createSolution({ workspace_id: workspace.id, name: `P${i}` }));
    const pages = [];
    for await (const page of api.pages('list_solutions', { size: 3, workspace_id: workspace.id })) pages.push(page);
    expect(pages.map((page) => [page.page, page.items.length])).toEqual([
      [1, 3],
      [2, 3],
      [3, 1],
    ]);
    const items = [];
    for await (const solution of api.items('list_solutions', { size: 3, workspace_id: workspace.id })) items.push(solution);
    expect(items).toEqual(created);
  });

  it('retries a command whose answer was lost with the same Idempotency-Key, so it is done once', async () => {
    const proxy = await answerLosingProxy(service.url, 2);
    try {
      const organization = `org_lost_${Date.now()}`;
      const token = await service.token([organization], allScopes);
      const viaProxy = createClient({ baseUrl: proxy.url, token, retryDelayMs: 10 });
      const workspace = await viaProxy.createWorkspace({ organization_id: organization, name: 'Once' });
      expect(proxy.idempotencyKeys).toHaveLength(3);
      expect(new Set(proxy.idempotencyKeys).size).toBe(1);
      const direct = createClient({ baseUrl: service.url, token, retries: 0 });
      expect((await direct.listWorkspaces({ page: 1, size: 10 })).items).toEqual([workspace]);

      // A later command gets a key of its own.
      await viaProxy.createWorkspace({ organization_id: organization, name: 'Twice' });
      expect(new Set(proxy.idempotencyKeys).size).toBe(2);
    } finally {
      await proxy.close();
    }
  });

  it('gives up after its retries with the connection failure', async () => {
    const proxy = await answerLosingProxy(service.url, 10);
    try {
      const client = createClient({ baseUrl: proxy.url, token: await service.token([org], allScopes), retries: 2, retryDelayMs: 10 });
      await expect(client.getWorkspace({ id: 'ws_any' })).rejects.toMatchObject({ name: 'ServiceUnreachable' });
    } finally {
      await proxy.close();
    }
  });
});
