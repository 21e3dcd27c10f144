import { afterEach, describe, expect, it } from 'vitest';
import { comparePositions } from '../../../src/eventstore/port.js';
import { advanceCheckpoint, readCheckpoint } from '../../../src/projections/tables.js';
import { RecordWriter, seededRandom } from '../../support/generate.js';
import { eventually, startStack, type Stack } from '../../support/stack.js';

async function appendMany(stack: Stack, writer: RecordWriter, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const append = writer.next();
    await stack.store.append(append.streamName, append.expectedVersion, append.events);
    append.applied();
  }
}

const caughtUp = (stack: Stack) => async () => (await stack.store.readAll(await readCheckpoint(stack.pool), 1)).length === 0;

describe('projector failures', () => {
  let stack: Stack;
  afterEach(() => stack?.close());

  it('loses and doubles nothing when its connection is killed mid-batch, again and again', async () => {
    stack = await startStack();
    await appendMany(stack, new RecordWriter('crash', 'org_a', seededRandom(7)), 300);

    let batches = 0;
    let kills = 0;
    stack
      .runner({
        batchSize: 9,
        // Every third batch: kill the projector's own connection after it wrote, before it commits.
        beforeCommit: async () => {
          batches += 1;
          if (batches % 3 !== 0) return;
          kills += 1;
          await stack.pool.query(
            `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND state = 'idle in transaction' AND pid <> pg_backend_pid()`,
          );
        },
      })
      .start();

    await eventually(caughtUp(stack), 60_000);

    expect(kills).toBeGreaterThan(5);
    // Counts are additive: a batch applied twice, or lost, would show here.
    expect(await stack.differences()).toEqual([]);
  });

  it('keeps exactly one projector active across instances and fails over when it stops', async () => {
    stack = await startStack();
    const first = stack.runner({ batchSize: 20 });
    const second = stack.runner({ batchSize: 20 });
    first.start();
    await eventually(() => first.isActive);
    second.start();

    const writer = new RecordWriter('failover', 'org_b', seededRandom(11));
    let bothActive = false;
    const watch = setInterval(() => {
      if (first.isActive && second.isActive) bothActive = true;
    }, 5);
    try {
      await appendMany(stack, writer, 60);
      await eventually(caughtUp(stack));
      expect(second.isActive).toBe(false);

      await first.stop();
      await eventually(() => second.isActive);
      await appendMany(stack, writer, 60);
      await eventually(caughtUp(stack));
    } finally {
      clearInterval(watch);
    }
    expect(bothActive).toBe(false);
    expect(await stack.differences()).toEqual([]);
  });

  it('refuses to move a checkpoint that another projector already moved', async () => {
    stack = await startStack();
    const start = await readCheckpoint(stack.pool);
    const next = { commit: 5n, prepare: 9n };
    expect(await advanceCheckpoint(stack.pool, start, next)).toBe(true);
    // A second projector that read the same starting checkpoint must not apply its batch.
    expect(await advanceCheckpoint(stack.pool, start, { commit: 6n, prepare: 1n })).toBe(false);
    expect(comparePositions(await readCheckpoint(stack.pool), next)).toBe(0);
  });
});
