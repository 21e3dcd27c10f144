import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { comparePositions, startOfLog, type GlobalPosition } from '../../../src/eventstore/port.js';
import { workspaceStream } from '../../../src/eventstore/stream-names.js';
import { blockingDeadLetter, listDeadLetters, resolveDeadLetter, skippedPositions } from '../../../src/projections/dead-letters.js';
import { rebuildReadModel } from '../../../src/projections/rebuild/index.js';
import type { ProjectionRunnerOptions } from '../../../src/projections/runner.js';
import { advanceCheckpoint, readCheckpoint } from '../../../src/projections/tables.js';
import { actualReadModel, compareReadModels, expectedReadModel } from '../../../src/projections/verify.js';
import { writeRawEvent } from '../../support/foreign-writes.js';
import { RecordWriter, seededRandom } from '../../support/generate.js';
import { eventually, silentLogger, startStack, type Stack } from '../../support/stack.js';
import { at, metadata, workspaceCreated } from '../../unit/fixtures.js';

/** Appends `count` writes; the position of the last, which on PostgreSQL a read of the log's end may not show yet (another transaction on the server holding the watermark back). */
async function appendMany(stack: Stack, writer: RecordWriter, count: number): Promise<GlobalPosition> {
  let last: GlobalPosition = startOfLog;
  for (let i = 0; i < count; i++) {
    const append = writer.next();
    ({ position: last } = await stack.store.append(append.streamName, append.expectedVersion, append.events));
    append.applied();
  }
  return last;
}

describe('projector failures', () => {
  let stack: Stack;
  afterEach(() => stack?.close());

  it('loses and doubles nothing when its connection is killed mid-batch, again and again', async () => {
    stack = await startStack();
    const last = await appendMany(stack, new RecordWriter('crash', 'org_a', seededRandom(7)), 300);

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

    await eventually(caughtUpTo(stack, last), 60_000);

    expect(kills).toBeGreaterThan(5);
    // Counts are additive: a batch applied twice, or lost, would show here.
    expect(await stack.differences()).toEqual([]);
  });

  it('loses and doubles nothing when its batch statement is killed while it runs, again and again', async () => {
    stack = await startStack();
    const last = await appendMany(stack, new RecordWriter('killed-write', 'org_a', seededRandom(13)), 200);
    stack.runner({ batchSize: 9 }).start();

    // A batch is one statement, its own transaction. Holding the counts table makes the next one
    // wait inside that statement; it is killed there, and the projector starts over.
    const blocker = await stack.pool.connect();
    let kills = 0;
    try {
      for (let round = 0; round < 4; round++) {
        await blocker.query('BEGIN');
        await blocker.query('LOCK TABLE organization_counts IN ACCESS EXCLUSIVE MODE');
        await eventually(async () => {
          const { rowCount } = await stack.pool.query(
            `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND state = 'active' AND wait_event_type = 'Lock' AND query LIKE 'WITH moved%'`,
          );
          return rowCount === 1;
        });
        kills += 1;
        await blocker.query('ROLLBACK');
      }
    } finally {
      blocker.release();
    }

    await eventually(caughtUpTo(stack, last), 60_000);
    expect(kills).toBe(4);
    // Counts are additive: a batch applied twice, or in part, would show here.
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
      await eventually(caughtUpTo(stack, await appendMany(stack, writer, 60)));
      expect(second.isActive).toBe(false);

      await first.stop();
      await eventually(() => second.isActive);
      await eventually(caughtUpTo(stack, await appendMany(stack, writer, 60)));
    } finally {
      clearInterval(watch);
    }
    expect(bothActive).toBe(false);
    expect(await stack.differences()).toEqual([]);
  });

  /** Projectors of little patience with each other's silence. */
  const patience = { staleAfterMs: 300, renewEveryMs: 100, standbyRetryMs: 50 };

  /** A leader (with `leaderOptions`) and a standby on a fresh stack; the leader's backend pid, and how to read it again. */
  async function leaderAndStandby(leaderOptions: Partial<ProjectionRunnerOptions> = {}) {
    stack = await startStack();
    const first = stack.runner({ ...patience, ...leaderOptions });
    const second = stack.runner(patience);
    first.start();
    await eventually(() => first.isActive);
    second.start();
    const leaderPid = async () => (await stack.pool.query<{ pid: number }>('SELECT pid FROM projector_leader')).rows[0]?.pid;
    return { first, second, leaderPid, leader: await leaderPid() };
  }

  it('keeps its leadership through a batch that waits on a lock longer than a standby waits for a sign of life, then applies it', async () => {
    const { first, second, leaderPid, leader } = await leaderAndStandby();
    // An operator's session holding the table: the batch's write waits for it, its statement running all along.
    const operator = await stack.pool.connect();
    try {
      await operator.query('BEGIN');
      await operator.query('LOCK TABLE workspaces IN EXCLUSIVE MODE');
      const writer = new RecordWriter('long-batch', 'org_b', seededRandom(12));
      const last = await appendMany(stack, writer, 1);
      await eventually(async () => {
        const { rows } = await stack.pool.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, [leader]);
        return rows.length === 1;
      });
      await new Promise((resolve) => setTimeout(resolve, 5 * patience.staleAfterMs));
      expect({ leader: await leaderPid(), first: first.isActive, second: second.isActive }).toEqual({ leader, first: true, second: false });
      await operator.query('COMMIT');
      await eventually(caughtUpTo(stack, last));
    } finally {
      await operator.query('ROLLBACK').catch(() => undefined);
      operator.release();
    }
    expect(await leaderPid()).toBe(leader);
    expect(await stack.differences()).toEqual([]);
  });

  it('keeps its leadership through a batch that spends longer than a standby waits in its own process, between its statements', async () => {
    // A batch may keep the process busy for seconds with no statement running (a large fold, rows
    // loaded on another connection): here, a pause before the batch commits.
    let pauses = 0;
    const { first, second, leaderPid, leader } = await leaderAndStandby({
      beforeCommit: async () => {
        pauses += 1;
        await new Promise((resolve) => setTimeout(resolve, 5 * patience.staleAfterMs));
      },
    });
    const writer = new RecordWriter('slow-batch', 'org_b', seededRandom(13));
    const last = await appendMany(stack, writer, 3);
    await eventually(caughtUpTo(stack, last));
    expect(pauses).toBeGreaterThan(0);
    expect({ leader: await leaderPid(), first: first.isActive, second: second.isActive }).toEqual({ leader, first: true, second: false });
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

const caughtUpTo = (stack: Stack, position: GlobalPosition) => async () =>
  comparePositions(await readCheckpoint(stack.pool), position) >= 0;

/**
 * The projector's policy for an event of the service's own it cannot apply: it stops there (the
 * read tables stay a faithful prefix of the log), records a dead letter and logs it, and goes on
 * only when an operator skips it or a retry succeeds. Runs with events in PostgreSQL and in EventStoreDB.
 */
describe('dead letters', () => {
  let stack: Stack;
  afterEach(() => stack?.close());

  it('stops before an own event it cannot read, and goes on without it only once an operator skips it; rebuild and verify follow', async () => {
    stack = await startStack();
    const writer = new RecordWriter('dlq', 'org_dlq', seededRandom(3));
    const before = await appendMany(stack, writer, 15);
    await writeRawEvent(stack.url, workspaceStream('ws_broken'), {
      type: 'WorkspaceCreated',
      data: { id: 'ws_broken', name: 7 },
      metadata: metadata(at('10:00:00.000000')),
    });
    const last = await appendMany(stack, writer, 15);

    const logLines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => void logLines.push(JSON.parse(line) as Record<string, unknown>) });
    stack.runner({ logger, deadLetterPollMs: 20 }).start();

    await eventually(async () => (await blockingDeadLetter(stack.pool)) !== undefined);
    const deadLetter = (await blockingDeadLetter(stack.pool))!;
    expect(deadLetter).toMatchObject({
      streamName: 'workspace-ws_broken',
      version: 1n,
      type: 'WorkspaceCreated',
      attempts: 1,
      error: expect.stringMatching(/data\.organization_id is missing/),
    });
    // Everything before it is applied, nothing after it: a faithful prefix of the log.
    await eventually(caughtUpTo(stack, before));
    expect(comparePositions(await readCheckpoint(stack.pool), before)).toBe(0);
    expect(await stack.differences()).toEqual([]);
    // Waiting cannot help: a wait for a later position answers at once, unreached.
    await eventually(() => stack.progress.stopped);
    expect(await stack.progress.waitFor(last, 600_000)).toBe(false);
    expect(logLines.find((line) => line.level === 50)).toMatchObject({
      msg: expect.stringContaining('projector stopped at an event it cannot apply'),
      stream: 'workspace-ws_broken',
      version: '1',
      type: 'WorkspaceCreated',
      position: expect.stringMatching(/^\d+:\d+$/),
    });

    // A retry while the cause remains fails again, and says so. Counted from the attempts before it:
    // a projector that restarts (its session lost under load) meets the event again and counts that too.
    const attemptsBefore = (await blockingDeadLetter(stack.pool))!.attempts;
    await resolveDeadLetter(stack.pool, deadLetter.deadLetterId, { action: 'retry', by: 'ops', note: undefined });
    const retryTaken = async () =>
      (
        await stack.pool.query('SELECT 1 FROM projection_dead_letters WHERE id = $1 AND retry_requested_at IS NULL', [
          deadLetter.deadLetterId,
        ])
      ).rowCount === 1;
    await eventually(async () => (await retryTaken()) && ((await blockingDeadLetter(stack.pool))?.attempts ?? 0) > attemptsBefore);

    await resolveDeadLetter(stack.pool, deadLetter.deadLetterId, { action: 'skip', by: 'ops', note: 'written by hand' });
    await eventually(caughtUpTo(stack, last));
    expect(stack.progress.stopped).toBe(false);
    expect((await listDeadLetters(stack.pool))[0]).toMatchObject({ resolution: 'skipped', resolvedBy: 'ops', note: 'written by hand' });
    const skipped = await skippedPositions(stack.pool);
    const verified = async () =>
      compareReadModels(await expectedReadModel(stack.store, undefined, skipped), await actualReadModel(stack.pool));
    expect(await verified()).toEqual([]);

    await rebuildReadModel({ connectionString: stack.url, store: stack.store, logger: silentLogger });
    expect(await verified()).toEqual([]);
  });

  it('finds the one event of a failing batch, stops at it, and applies it on a retry once the cause is gone', async () => {
    stack = await startStack();
    // The read database refuses the row one event makes: a constraint an operator added, say.
    await stack.pool.query(`ALTER TABLE workspaces ADD CONSTRAINT no_forbidden_names CHECK (name <> 'forbidden')`);
    const writer = new RecordWriter('refused', 'org_refused', seededRandom(4));
    const before = await appendMany(stack, writer, 12);
    const refused = workspaceCreated(at('10:00:00.000000'), { id: 'ws_forbidden', organization_id: 'org_refused', name: 'forbidden' });
    await stack.store.append(workspaceStream('ws_forbidden'), 0n, [{ id: randomUUID(), ...refused }]);
    const last = await appendMany(stack, writer, 12);

    stack.runner({ batchSize: 50, deadLetterPollMs: 20 }).start();
    await eventually(async () => (await blockingDeadLetter(stack.pool)) !== undefined);
    expect(await blockingDeadLetter(stack.pool)).toMatchObject({
      streamName: 'workspace-ws_forbidden',
      type: 'WorkspaceCreated',
      error: expect.stringContaining('no_forbidden_names'),
    });
    await eventually(caughtUpTo(stack, before));
    expect(comparePositions(await readCheckpoint(stack.pool), before)).toBe(0);

    await stack.pool.query('ALTER TABLE workspaces DROP CONSTRAINT no_forbidden_names');
    const [deadLetter] = await listDeadLetters(stack.pool);
    await resolveDeadLetter(stack.pool, deadLetter!.deadLetterId, { action: 'retry', by: 'ops', note: 'constraint dropped' });
    await eventually(caughtUpTo(stack, last));
    expect((await listDeadLetters(stack.pool))[0]).toMatchObject({ resolution: 'retried', resolvedBy: 'ops', attempts: 1 });
    expect(await stack.differences()).toEqual([]);
  });
});
