import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { comparePositions, startOfLog, type GlobalPosition } from '../../../src/eventstore/port.js';
import { noChanges } from '../../../src/projections/batch.js';
import { readCheckpoint, readRowTables, writeChanges } from '../../../src/projections/tables.js';
import { RecordWriter, seededRandom } from '../../support/generate.js';
import { eventually, startStack, withReadAll, type Stack } from '../../support/stack.js';

/**
 * Appends `count` commands' events of random writers (creates, updates, deletions, workspaces
 * deleted under their solutions); the position of the last.
 */
async function appendHistory(stack: Stack, writers: RecordWriter[], count: number, random: () => number): Promise<GlobalPosition> {
  let last = startOfLog;
  for (let i = 0; i < count; i++) {
    const append = writers[Math.floor(random() * writers.length)]!.next();
    ({ position: last } = await stack.store.append(append.streamName, append.expectedVersion, append.events));
    append.applied();
  }
  return last;
}

/**
 * Waits for the checkpoint to pass `end`, the test's own last append. Not the store's last position:
 * on PostgreSQL that stops short of transactions any database of the server still runs (other test
 * files, other programs), and the wait would end before the test's last events were projected.
 */
async function caughtUp(stack: Stack, end: GlobalPosition): Promise<void> {
  await eventually(async () => comparePositions(await readCheckpoint(stack.pool), end) >= 0, 60_000);
}

/**
 * While it catches up, the live projector keeps the rows its batches wrote or read in memory
 * (src/projections/row-cache.ts). Here its batches grow from 10 to 640 events and it keeps 40 to 300
 * rows, so rows are forgotten and read again, records are updated after being forgotten, and
 * workspaces are deleted with solutions it kept, forgot or never saw.
 */
describe('the live projector catching up with rows kept between batches', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.close());

  it('ends with the read tables a fold of the log gives, from empty tables, from tables already filled, and after catching up again', async () => {
    const random = seededRandom(7);
    const writers = ['a', 'b', 'c'].map((name, index) => new RecordWriter(name, `org_${index}`, random));
    await appendHistory(stack, writers, 1500, random);

    // From empty tables; stopped part way, so that the next one starts on rows it never kept.
    const first = stack.runner({ batchSize: 10, maxBatchSize: 40, cachedRows: 40 });
    first.start();
    await eventually(async () => (await stack.pool.query('SELECT count(*)::int AS n FROM workspaces')).rows[0].n > 20);
    await first.stop();

    const end = await appendHistory(stack, writers, 1500, random);
    const second = stack.runner({ batchSize: 10, maxBatchSize: 640, cachedRows: 300 });
    second.start();
    await caughtUp(stack, end);
    expect(await stack.differences()).toEqual([]);

    // Behind again: a burst while it runs.
    await caughtUp(stack, await appendHistory(stack, writers, 1500, random));
    expect(await stack.differences()).toEqual([]);
  });

  it('writes nothing when the tables it read its rows from were replaced (as a rebuild switches over) at its very checkpoint', async () => {
    const checkpoint = await readCheckpoint(stack.pool);
    const rowTables = await readRowTables(stack.pool);
    await stack.pool.query(`BEGIN;
      ALTER TABLE workspaces RENAME TO workspaces_replaced;
      CREATE TABLE workspaces (LIKE workspaces_replaced INCLUDING ALL);
      INSERT INTO workspaces SELECT * FROM workspaces_replaced;
      DROP TABLE workspaces_replaced;
      COMMIT`);
    const row = {
      id: 'ws_stale',
      organization_id: 'org_0',
      name: 'stale',
      description: '',
      attributes: {},
      created_at: '2026-01-01T00:00:00.000000Z',
      updated_at: '2026-01-01T00:00:00.000000Z',
    };
    const changes = { ...noChanges(), upsertWorkspaces: [row] };
    const to = { commit: checkpoint.commit + 1n, prepare: checkpoint.prepare };
    expect(await writeChanges(stack.pool, changes, { from: checkpoint, to, rowTables })).toBe(false);
    expect((await stack.pool.query("SELECT count(*)::int AS n FROM workspaces WHERE id = 'ws_stale'")).rows[0].n).toBe(0);
    expect(await readCheckpoint(stack.pool)).toEqual(checkpoint);
    // The same move, told of the tables as they are now, is made.
    expect(await writeChanges(stack.pool, changes, { from: checkpoint, to, rowTables: await readRowTables(stack.pool) })).toBe(true);
  });
});

describe('the live projector reaching the end of a backlog', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.close());

  it('applies the short page at the log end in one batch, not event by event', async () => {
    const random = seededRandom(13);
    const writers = ['a', 'b'].map((name, index) => new RecordWriter(name, `org_${index}`, random));
    const end = await appendHistory(stack, writers, 805, random);
    // The short page arrives after the last full one is written, as from a store busy serving it:
    // its rows are then read on the catch-up's connection while the projector learns that it is
    // caught up, which ended that connection under the read. The batch failed, and its events were
    // applied again one at a time.
    const slowAtTheEnd = withReadAll(stack.store, async (after, limit) => {
      const events = await stack.store.readAll(after, limit);
      if (events.length > 0 && events.length < limit) await new Promise((resolve) => setTimeout(resolve, 300));
      return events;
    });
    const batches: number[] = [];
    const runner = stack.runner({
      store: slowAtTheEnd,
      batchSize: 10,
      maxBatchSize: 40,
      cachedRows: 40,
      onBatchApplied: (events) => batches.push(events),
    });
    runner.start();
    await caughtUp(stack, end);
    await runner.stop();
    expect(await stack.differences()).toEqual([]);
    const lastFull = batches.lastIndexOf(40);
    expect(lastFull).toBeGreaterThan(0);
    // The short page (15 events) in one batch of its own.
    expect(batches.slice(lastFull + 1), `batches: ${batches.join(' ')}`).toEqual([15]);
  });
});

describe('the live projector far behind', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.close());

  // In bulk where the store reads its log stream by stream (PostgreSQL); EventStoreDB cannot, and the backlog goes batch by batch.
  it('projects a backlog of most of the log the way a rebuild does where the store allows, then goes on batch by batch', async () => {
    const bulk = stack.store.readLogByStream !== undefined;
    const random = seededRandom(11);
    const writers = ['a', 'b'].map((name, index) => new RecordWriter(name, `org_${index}`, random));
    const end = await appendHistory(stack, writers, 1200, random);
    const logLines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void logLines.push(JSON.parse(line) as Record<string, unknown>) });
    const tablesBefore = await readRowTables(stack.pool);
    stack.runner({ logger, bulkCatchUpEvents: 500 }).start();
    await caughtUp(stack, end);
    expect(await stack.differences()).toEqual([]);
    const inBulk = () => logLines.filter((line) => line.msg === 'backlog projected in bulk').length;
    // Logged just after the switch-over moved the checkpoint.
    if (bulk) await eventually(() => inBulk() === 1);
    // Where in bulk: new tables, switched in with the checkpoint.
    expect((await readRowTables(stack.pool)).workspaces !== tablesBefore.workspaces).toBe(bulk);

    // Caught up, it goes on batch by batch: what is appended now is projected into the same tables.
    const tablesAfter = await readRowTables(stack.pool);
    await caughtUp(stack, await appendHistory(stack, writers, 300, random));
    expect(await stack.differences()).toEqual([]);
    expect(await readRowTables(stack.pool)).toEqual(tablesAfter);
    expect(inBulk()).toBe(bulk ? 1 : 0);
  });
});
