import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { comparePositions, type EventStore, type GlobalPosition } from '../../../src/eventstore/port.js';
import { PostgresEventStore } from '../../../src/eventstore/postgres.js';
import { readCheckpoint } from '../../../src/projections/tables.js';
import { RecordWriter, seededRandom } from '../../support/generate.js';
import { eventually, startStack, withReadAll, type Stack } from '../../support/stack.js';

/**
 * The stack's store, counting the pages the projector reads, and those that held nothing though
 * nothing was hidden: with events in PostgreSQL, an empty page is left out of both counts when
 * the log held an event past it that the read did not see (an append of any database of the
 * server still running hides the events committed after it began; the store reads again every
 * few milliseconds until it ends, as many times as a busy server makes it).
 */
function countingReads(stack: Stack): { store: EventStore; reads: () => number; emptyReads: () => number } {
  const { store } = stack;
  let reads = 0;
  let emptyReads = 0;
  const hiddenPast = async (after: GlobalPosition) =>
    store instanceof PostgresEventStore &&
    (
      await stack.pool.query<{ hidden: boolean }>(
        'SELECT EXISTS (SELECT FROM es_events WHERE (transaction_id, position) > ($1::text::xid8, $2::bigint)) AS hidden',
        [after.commit.toString(), after.prepare.toString()],
      )
    ).rows[0]!.hidden;
  // Counted once answered, both: a read under way when the test takes its counts is counted after, whole.
  const counting = withReadAll(store, async (after, limit) => {
    const events = await store.readAll(after, limit);
    if (events.length > 0) reads += 1;
    else if (!(await hiddenPast(after))) {
      reads += 1;
      emptyReads += 1;
    }
    return events;
  });
  return { store: counting, reads: () => reads, emptyReads: () => emptyReads };
}

/**
 * Caught up, the projector reads the log once per batch: after a page shorter than it asked for it
 * is at the log's end, and waits for the next append before reading again, rather than read an
 * empty page first.
 */
describe('the live projector at the log end', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.close());

  it('reads one page per command projected, not a page and an empty one', async () => {
    const random = seededRandom(5);
    const writer = new RecordWriter('a', 'org_reads', random);
    // As the service has it when its own projector is the active one (src/runtime/service.ts):
    // appends wake it in the process, with no notification besides.
    if (stack.store instanceof PostgresEventStore) stack.store.readLocally(() => true);
    const { store, reads, emptyReads } = countingReads(stack);
    const batches: number[] = [];
    // Its idle wait never times out here: every read is one the projector chose to make.
    const runner = stack.runner({ store, minIdlePollMs: 60_000, maxIdlePollMs: 60_000, onBatchApplied: (events) => batches.push(events) });
    runner.start();
    const projected = async (position: GlobalPosition) =>
      eventually(async () => comparePositions(await readCheckpoint(stack.pool), position) >= 0);
    const first = writer.next();
    await projected((await stack.store.append(first.streamName, first.expectedVersion, first.events)).position);
    first.applied();
    // Its batch reported too: the checkpoint is seen moved a moment before the projector hears its commit.
    await eventually(() => batches.length > 0);
    const [readsBefore, emptyBefore, batchesBefore] = [reads(), emptyReads(), batches.length];
    const commands = 20;
    for (let i = 0; i < commands; i++) {
      const append = writer.next();
      const { position } = await stack.store.append(append.streamName, append.expectedVersion, append.events);
      append.applied();
      await projected(position);
    }
    await runner.stop();
    expect(batches.length - batchesBefore).toBe(commands);
    const [read, empty] = [reads() - readsBefore, emptyReads() - emptyBefore];
    // One read per command. A few more are left only where a wake-up came for a page already read,
    // or an append was committing as the page was read: the build before read an empty page after
    // every batch, 40 to 60 reads here.
    expect(empty, `${read} reads, ${empty} of them empty`).toBeLessThanOrEqual(commands / 4);
    expect(read, `${read} reads, ${empty} of them empty`).toBeLessThanOrEqual(commands + commands / 4);
    expect(await stack.differences()).toEqual([]);
  });
});
