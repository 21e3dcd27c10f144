import { expect } from 'vitest';
import { startOfLog, type EventStore } from '../../../src/eventstore/port.js';
import { streamPrefixes } from '../../../src/eventstore/stream-names.js';
import type { Pool } from '../../../src/infra/postgres.js';
import { readCheckpoint } from '../../../src/projections/tables.js';
import type { Page, PageRequest } from '../../../src/read/pages.js';
import { getSolution, listSolutions } from '../../../src/read/solutions.js';
import { getWorkspace, listWorkspaces } from '../../../src/read/workspaces.js';
import { callApi, type TestService } from '../../support/service.js';

/** Every record id that ever had a stream, from the log. */
async function everyRecordId(store: EventStore): Promise<{ workspaces: string[]; solutions: string[] }> {
  const workspaces = new Set<string>();
  const solutions = new Set<string>();
  let position = startOfLog;
  for (;;) {
    const batch = await store.readAll(position, 1000);
    if (batch.length === 0) break;
    for (const event of batch) {
      if (event.streamName.startsWith(streamPrefixes.workspace)) workspaces.add(event.streamName.slice(streamPrefixes.workspace.length));
      if (event.streamName.startsWith(streamPrefixes.solution)) solutions.add(event.streamName.slice(streamPrefixes.solution.length));
    }
    position = batch[batch.length - 1]!.position;
  }
  return { workspaces: [...workspaces].sort(), solutions: [...solutions].sort() };
}

async function allPages<T>(fetch: (request: PageRequest) => Promise<Page<T>>): Promise<{ total: number; items: T[] }> {
  const items: T[] = [];
  let total = 0;
  for (let page = 1; ; page++) {
    const result = await fetch({ page, size: 50 });
    total = result.total;
    items.push(...result.items);
    if (result.items.length < 50) break;
  }
  return { total, items };
}

/**
 * What readers see: every list (all organizations, each organization, each workspace's
 * solutions) with its totals, and every record that ever existed read by id.
 */
export async function readSide(pool: Pool, store: EventStore, organizations: string[]) {
  const ids = await everyRecordId(store);
  const lists: Record<string, unknown> = {
    workspaces: await allPages((page) => listWorkspaces(pool, organizations, page)),
    solutions: await allPages((page) => listSolutions(pool, organizations, undefined, page)),
  };
  for (const organization of organizations) {
    lists[`workspaces of ${organization}`] = await allPages((page) => listWorkspaces(pool, [organization], page));
    lists[`solutions of ${organization}`] = await allPages((page) => listSolutions(pool, [organization], undefined, page));
  }
  for (const id of ids.workspaces) {
    lists[`solutions of ${id}`] = await allPages((page) => listSolutions(pool, organizations, id, page));
  }
  const records: Record<string, unknown> = {};
  for (const id of ids.workspaces) records[id] = (await getWorkspace(pool, id, organizations)) ?? null;
  for (const id of ids.solutions) records[id] = (await getSolution(pool, id, organizations)) ?? null;
  return { lists, records };
}

/** True once the projection has applied every event and no cascade is left to do. */
export async function settled(pool: Pool, store: EventStore): Promise<boolean> {
  const checkpoint = await readCheckpoint(pool);
  if ((await store.readAll(checkpoint, 1)).length > 0) return false;
  const { rows } = await pool.query<{ n: string }>('SELECT count(*) AS n FROM cascade_pending WHERE done_at IS NULL');
  return rows[0]!.n === '0';
}

export async function rebuildSchemasLeft(pool: Pool): Promise<string[]> {
  const { rows } = await pool.query<{ name: string }>(`SELECT nspname AS name FROM pg_namespace WHERE nspname LIKE 'read\\_rebuild\\_%'`);
  return rows.map((row) => row.name);
}

type Live = { workspaces: { id: string; organization: string }[]; solutions: { id: string; workspaceId: string }[] };

/**
 * A client making random changes over HTTP: creates, updates and deletes of workspaces and
 * solutions, and workspace deletions with their solutions (real cascades). With `checkReads`,
 * it reads its own writes back at once (read-your-writes) and records what it did not find.
 */
export class ApiWriter {
  readonly live: Live = { workspaces: [], solutions: [] };
  readonly readYourWritesFailures: string[] = [];
  changes = 0;
  private counter = 0;

  constructor(
    private readonly service: Pick<TestService, 'url'>,
    private readonly token: string,
    private readonly organizations: string[],
    private readonly random: () => number,
    private readonly checkReads = false,
  ) {}

  private pick<T>(items: T[]): T {
    return items[Math.floor(this.random() * items.length)]!;
  }

  private async call(query: string, params: unknown) {
    const response = await callApi(this.service, this.token, query, params);
    expect({ query, status: response.status, body: response.status === 200 ? undefined : response.body }).toEqual({
      query,
      status: 200,
      body: undefined,
    });
    this.changes += 1;
    return response.body.data;
  }

  private async readBack(query: string, id: string, expected: (data: any, status: number) => boolean) {
    if (!this.checkReads) return;
    const response = await callApi(this.service, this.token, query, { id });
    if (!expected(response.body?.data, response.status)) {
      this.readYourWritesFailures.push(`${query} ${id}: ${response.status} ${JSON.stringify(response.body)}`);
    }
  }

  async step(): Promise<void> {
    const roll = this.random();
    const n = this.counter++;
    if (this.live.workspaces.length < 3 || roll < 0.2) {
      const organization = this.pick(this.organizations);
      const created = await this.call('create_workspace', {
        organization_id: organization,
        name: `workspace ${n}`,
        description: `made by step ${n}`,
        attributes: { step: n, tags: { a: n % 3 } },
      });
      this.live.workspaces.push({ id: created.id, organization });
      await this.readBack('get_workspace', created.id, (data, status) => status === 200 && data.name === `workspace ${n}`);
    } else if (roll < 0.5) {
      const workspace = this.pick(this.live.workspaces);
      const created = await this.call('create_solution', { workspace_id: workspace.id, name: `solution ${n}`, attributes: { n } });
      this.live.solutions.push({ id: created.id, workspaceId: workspace.id });
      await this.readBack('get_solution', created.id, (data, status) => status === 200 && data.name === `solution ${n}`);
    } else if (roll < 0.62) {
      const workspace = this.pick(this.live.workspaces);
      await this.call('update_workspace', { id: workspace.id, name: `renamed ${n}`, attributes: { tags: { b: n } } });
      await this.readBack('get_workspace', workspace.id, (data, status) => status === 200 && data.name === `renamed ${n}`);
    } else if (roll < 0.82 && this.live.solutions.length > 0) {
      const solution = this.pick(this.live.solutions);
      await this.call('update_solution', { id: solution.id, name: `changed ${n}`, description: `step ${n}` });
      await this.readBack('get_solution', solution.id, (data, status) => status === 200 && data.name === `changed ${n}`);
    } else if (roll < 0.92 && this.live.solutions.length > 0) {
      const solution = this.pick(this.live.solutions);
      await this.call('delete_solution', { id: solution.id });
      this.live.solutions = this.live.solutions.filter((s) => s.id !== solution.id);
      await this.readBack('get_solution', solution.id, (_data, status) => status === 404);
    } else {
      const workspace = this.pick(this.live.workspaces);
      const hidden = this.live.solutions.filter((s) => s.workspaceId === workspace.id);
      await this.call('delete_workspace', { id: workspace.id });
      this.live.workspaces = this.live.workspaces.filter((w) => w.id !== workspace.id);
      this.live.solutions = this.live.solutions.filter((s) => s.workspaceId !== workspace.id);
      await this.readBack('get_workspace', workspace.id, (_data, status) => status === 404);
      for (const solution of hidden) await this.readBack('get_solution', solution.id, (_data, status) => status === 404);
    }
  }
}
