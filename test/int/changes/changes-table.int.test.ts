import { getEventListeners } from 'node:events';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createChangeFeed } from '../../../src/changes/adapters/feed.js';
import { insertChanges, readChanges } from '../../../src/changes/adapters/table.js';
import { decodeCursor, encodeCursor } from '../../../src/changes/cursor.js';
import { changeEntriesOf, changeTypes, type ChangeQuery, type FeedEvent } from '../../../src/changes/feed.js';
import type { Envelope } from '../../../src/domain/events.js';
import { startOfLog, type GlobalPosition } from '../../../src/eventstore/port.js';
import { migrate } from '../../../src/infra/migrate.js';
import { noChanges } from '../../../src/projections/batch.js';
import { writeChanges } from '../../../src/projections/tables.js';
import { createTestDatabase } from '../../support/database.js';

/** The changes table and its queries on a real PostgreSQL: the projector's step, the key lookup, the merge of organizations, the long poll. */
describe('the changes table', () => {
  let pool: pg.Pool;
  const metadata = { actor: 'alice', request_id: 'r', occurred_at: '2026-11-25T10:00:00.000000Z', schema_version: 2 };
  let commit = 0n;
  const event = (body: Omit<Envelope, 'metadata'>, streamName: string, version: bigint): FeedEvent => ({
    event: { ...body, metadata } as Envelope,
    streamName,
    version,
    // Positions from 1 to past 10, so that a text sort would misorder them.
    position: { commit: (commit += 1n), prepare: 0n },
  });
  const createWorkspace = (id: string, organization: string, version = 1n) =>
    event(
      { type: 'WorkspaceCreated', data: { id, organization_id: organization, name: id, description: '', attributes: {} } },
      `workspace-${id}`,
      version,
    );
  const updateWorkspace = (id: string, version: bigint) =>
    event({ type: 'WorkspaceUpdated', data: { id, name: `${id} v${version}` } }, `workspace-${id}`, version);
  const write = (events: FeedEvent[]) => writeChanges(pool, { ...noChanges(), feed: changeEntriesOf(events) });
  const query = (overrides: Partial<ChangeQuery> = {}): ChangeQuery => ({
    organizations: ['org_a', 'org_b'],
    workspaceId: undefined,
    types: [...changeTypes],
    after: startOfLog,
    limit: 100,
    ...overrides,
  });

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: await createTestDatabase(), max: 4 });
    await migrate(pool, { eventStore: false });
    // One batch creates and updates; later batches update records created earlier, across organizations.
    await write([createWorkspace('ws_a1', 'org_a'), updateWorkspace('ws_a1', 2n), createWorkspace('ws_b1', 'org_b')]);
    for (let version = 3n; version <= 7n; version++)
      await write([updateWorkspace('ws_a1', version), updateWorkspace('ws_b1', version - 1n)]);
    await write([createWorkspace('ws_c1', 'org_c')]);
    // An update of a record whose creation is not in the table (skipped as a dead letter): nobody's.
    await write([updateWorkspace('ws_orphan', 2n)]);
  });
  afterAll(() => pool?.end());

  it('gives an update the organization and workspace of its record, from the batch or the table', async () => {
    const { rows } = await pool.query<{ stream_name: string; version: string; organization_id: string; workspace_id: string }>(
      'SELECT stream_name, version::text, organization_id, workspace_id FROM changes ORDER BY commit_position',
    );
    expect(rows.filter((row) => row.stream_name === 'workspace-ws_a1').map((row) => [row.version, row.organization_id])).toEqual(
      ['1', '2', '3', '4', '5', '6', '7'].map((version) => [version, 'org_a']),
    );
    expect(rows.filter((row) => row.stream_name === 'workspace-ws_b1').every((row) => row.organization_id === 'org_b')).toBe(true);
    expect(rows.some((row) => row.stream_name === 'workspace-ws_orphan')).toBe(false);
  });

  it("merges the caller's organizations in log order, not in text order, and never reads another's", async () => {
    const { rows } = await readChanges(pool, query());
    const positions = rows.map((row) => Number(row.commit_position));
    expect(positions).toEqual([...positions].sort((a, b) => a - b));
    expect(positions.length).toBe(13);
    expect(new Set(rows.map((row) => row.organization_id))).toEqual(new Set(['org_a', 'org_b']));
  });

  /** Every change after `startOfLog`, page by page, as positions; and how many pages it took. */
  async function pageThrough(limit: number, workspaceId?: string, budget?: number): Promise<{ seen: string[]; pages: number }> {
    const seen: string[] = [];
    let after: GlobalPosition = startOfLog;
    for (let pages = 1; ; pages++) {
      const page = await readChanges(pool, query({ after, limit, workspaceId }), budget);
      expect(page.rows.length).toBeLessThanOrEqual(limit);
      seen.push(...page.rows.map((row) => row.commit_position));
      if (!page.more) return { seen, pages };
      expect(page.rows.length).toBeGreaterThan(0);
      after = decodeCursor(encodeCursor({ commit: BigInt(page.rows.at(-1)!.commit_position), prepare: 0n }))!;
    }
  }

  it('pages exactly once: limit + 1 rows tell whether more follow, and a cursor continues after its position', async () => {
    const all = (await readChanges(pool, query())).rows.map((row) => row.commit_position);
    const { seen, pages } = await pageThrough(4);
    expect(seen).toEqual(all);
    expect(pages).toBe(Math.ceil(all.length / 4));
  });

  it("stops a page short of its limit before the changes' data would pass the page's budget, shows the first whatever its size, and says more follow", async () => {
    const all = (await readChanges(pool, query())).rows.map((row) => row.commit_position);
    const oneEach = await pageThrough(100, undefined, 1);
    expect(oneEach).toEqual({ seen: all, pages: all.length });
    const workspace = (await readChanges(pool, query({ workspaceId: 'ws_b1' }))).rows.map((row) => row.commit_position);
    expect(await pageThrough(100, 'ws_b1', 1)).toEqual({ seen: workspace, pages: workspace.length });
    const within = await readChanges(pool, query());
    expect(within.more).toBe(false);
    // A page holds the changes whose data fits the budget, and not the one that would pass it.
    const { rows: sized } = await pool.query<{ size: number }>(
      'SELECT octet_length(data::text) AS size FROM changes WHERE commit_position = ANY($1::numeric[]) ORDER BY commit_position, prepare_position',
      [all.slice(0, 2)],
    );
    const sizes = sized.map((row) => row.size);
    const twoFit = await readChanges(pool, query(), sizes[0]! + sizes[1]!);
    expect(twoFit.rows.map((row) => row.commit_position)).toEqual(all.slice(0, 2));
    expect(twoFit.more).toBe(true);
    const oneFits = await readChanges(pool, query(), sizes[0]! + sizes[1]! - 1);
    expect(oneFits.rows.map((row) => row.commit_position)).toEqual(all.slice(0, 1));
  });

  it('filters by workspace and by type', async () => {
    expect((await readChanges(pool, query({ workspaceId: 'ws_b1' }))).rows.map((row) => row.record_id)).toEqual(Array(6).fill('ws_b1'));
    expect((await readChanges(pool, query({ workspaceId: 'ws_c1' }))).rows.length).toBe(0);
    expect((await readChanges(pool, query({ types: ['WorkspaceCreated'] }))).rows.map((row) => row.record_id)).toEqual(['ws_a1', 'ws_b1']);
  });

  it('long-polls: wakes when the projection moves past what it saw, or answers empty when the time is up', async () => {
    let current: GlobalPosition = { commit: commit, prepare: 0n };
    let wake: (() => void) | undefined;
    const progress = {
      get current() {
        return current;
      },
      waitPast: (_position: GlobalPosition, timeoutMs: number) =>
        new Promise<boolean>((resolve) => {
          wake = () => resolve(true);
          setTimeout(() => resolve(false), timeoutMs);
        }),
    };
    const feed = createChangeFeed(pool, progress);
    const after = { commit, prepare: 0n };
    const empty = await feed(query({ after }), 100);
    expect(empty).toEqual({ items: [], next: encodeCursor(after), has_more: false });

    const waiting = feed(query({ after }), 10_000);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await write([updateWorkspace('ws_a1', 8n)]);
    current = { commit, prepare: 0n };
    wake!();
    const woken = await waiting;
    expect(woken.items.map((change) => [change.type, change.version, change.organization_id])).toEqual([['WorkspaceUpdated', 8, 'org_a']]);
  });

  it("leaves nothing on the caller's signal once it has answered, however often it waited (a stream waits on one signal for hours)", async () => {
    const progress = {
      current: { commit, prepare: 0n },
      waitPast: (_position: GlobalPosition, timeoutMs: number) =>
        new Promise<boolean>((resolve) => setTimeout(() => resolve(false), timeoutMs)),
    };
    const feed = createChangeFeed(pool, progress);
    const { signal } = new AbortController();
    for (let i = 0; i < 12; i++) await feed(query({ after: { commit, prepare: 0n } }), 5, signal);
    expect(getEventListeners(signal, 'abort')).toHaveLength(0);
  });

  it("writes a batch's rows probing the table by key, never scanning it, on a table of a few thousand rows", async () => {
    // Its own database: the rows below would change what the other tests read.
    const own = new pg.Pool({ connectionString: await createTestDatabase(), max: 1 });
    try {
      await migrate(own, { eventStore: false });
      const creates = Array.from({ length: 4000 }, (_, index) => createWorkspace(`ws_many${index}`, 'org_many'));
      for (let from = 0; from < creates.length; from += 500)
        await writeChanges(own, { ...noChanges(), feed: changeEntriesOf(creates.slice(from, from + 500)) });
      await own.query('ANALYZE changes');
      // A batch as the projector writes it live: a few events, an update of an earlier record among them.
      const parameters: unknown[] = [];
      const batch = changeEntriesOf([updateWorkspace('ws_many7', 2n), createWorkspace('ws_late', 'org_many')]);
      const sql = insertChanges((value) => `$${parameters.push(value)}`, batch, 'true');
      const { rows } = await own.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${sql}`, parameters);
      const plan = rows.map((row) => row['QUERY PLAN']).join('\n');
      // The planner takes the batch for 100 rows: joined to the table, it found a whole scan cheaper.
      expect(plan).not.toMatch(/Seq Scan on changes/);
      expect(plan).toMatch(/Index Scan using changes_by_stream/);
    } finally {
      await own.end();
    }
  });
});
