import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getEventListeners } from 'node:events';
import { comparePositions, startOfLog, type GlobalPosition } from '../../../src/eventstore/port.js';
import { RecordWriter, seededRandom, workspaceHistories, type PlannedAppend } from '../../support/generate.js';
import { eventually, startStack, type Stack } from '../../support/stack.js';
import { createChangeFeed } from '../../../src/changes/adapters/feed.js';
import { changeTypes } from '../../../src/changes/feed.js';

/** Appends every one of `appends` (records' histories), 16 at a time; the position of the last in the log. */
async function appendAll(stack: Stack, appends: PlannedAppend[]): Promise<GlobalPosition> {
  let last = startOfLog;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      for (let next = appends.pop(); next; next = appends.pop()) {
        const { position } = await stack.store.append(next.streamName, next.expectedVersion, next.events);
        if (comparePositions(position, last) > 0) last = position;
      }
    }),
  );
  return last;
}

/**
 * The rate the projection moves at, as this instance sees it, decides whether a command may give
 * up its wait at once (src/projections/progress.ts). Caught up, that rate is only the rate events
 * arrive at: it must never make an ordinary lag look out of reach.
 */
describe('a command behind a small lag', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.close());

  it('given a projection that has only seen a trickle of events, is waited for, not given up', async () => {
    stack.runner().start();
    const writer = new RecordWriter('trickle', 'org_trickle', seededRandom(5));
    const append = async () => {
      const next = writer.next();
      const { position } = await stack.store.append(next.streamName, next.expectedVersion, next.events);
      next.applied();
      return position;
    };
    for (let event = 0; event < 4; event++) {
      expect(await stack.progress.waitFor(await append(), 5000)).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
    // A few events a second so far: at that rate, one more event looks a third of a second away.
    const position = await append();
    expect(stack.progress.outOfReach(position, 100)).toBe(false);
    expect(stack.progress.stalled).toBe(false);
    expect(await stack.progress.waitFor(position, 5000)).toBe(true);
  });
});

describe('a command behind a burst of imports', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.close());

  it('given a trickle and then a burst of imports, is waited for until a rate is measured on the burst itself', async () => {
    const runner = stack.runner();
    runner.start();
    const writer = new RecordWriter('before-burst', 'org_trickle', seededRandom(6));
    for (let event = 0; event < 4; event++) {
      const next = writer.next();
      const { position } = await stack.store.append(next.streamName, next.expectedVersion, next.events);
      next.applied();
      expect(await stack.progress.waitFor(position, 5000)).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
    // The projector is away while 12,000 events are imported at once.
    await runner.stop();
    const appends = workspaceHistories('burst', 'org_trickle', 2_400, 5);
    const last = await appendAll(stack, appends);
    // Only the trickle's rate, a few events a second, is known: it says nothing of what the
    // projector manages with a backlog to apply, so the command waits as usual.
    expect(stack.progress.outOfReach(last, 100)).toBe(false);
    expect(stack.progress.stalled).toBe(false);
  });
});

/**
 * The webhook dispatcher and every open change stream wait for news over and over on one signal
 * that lives as long as they do: each wait must take its listener with it, or a quiet service
 * gathers one per wait (found as Node's MaxListenersExceededWarning in a long catch-up).
 */
describe('long polls on a long-lived signal', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.close());

  it('leave no listener on the signal once each is over, however it ended', async () => {
    const stream = new AbortController();
    const listeners = () => getEventListeners(stream.signal, 'abort').length;
    const feed = createChangeFeed(stack.pool, stack.progress);
    const query = { organizations: ['org_news'], workspaceId: undefined, types: [...changeTypes], limit: 100 };
    for (let poll = 0; poll < 20; poll++) {
      expect((await feed({ ...query, after: stack.progress.current }, 5, stream.signal)).items).toEqual([]);
    }
    expect(listeners()).toBe(0);

    stack.runner().start();
    const writer = new RecordWriter('news', 'org_news', seededRandom(6));
    const polling = feed({ ...query, after: stack.progress.current }, 10_000, stream.signal);
    const next = writer.next();
    await stack.store.append(next.streamName, next.expectedVersion, next.events);
    expect((await polling).items).toHaveLength(1);
    expect(listeners()).toBe(0);

    const aborted = feed({ ...query, after: stack.progress.current }, 10_000, stream.signal);
    stream.abort();
    expect((await aborted).items).toEqual([]);
    expect(listeners()).toBe(0);
  });
});

/**
 * A bulk catch-up (a fresh read database over a long log) moves the checkpoint only once, when it
 * is done: the estimate of the time left comes from the pace its projector tells meanwhile.
 */
describe('a bulk catch-up', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.close());

  it('gives every instance an estimate of the time it takes before its checkpoint moves, from a checkpoint part way', async () => {
    // A read database restored from a backup: its checkpoint a fifth of the way into the log.
    const restored = await appendAll(stack, workspaceHistories('restored', 'org_bulk', 2_000, 5));
    const batchByBatch = stack.runner();
    batchByBatch.start();
    await eventually(async () => {
      await stack.progress.refresh();
      return comparePositions(stack.progress.current, restored) >= 0;
    });
    await batchByBatch.stop();
    const checkpoint = stack.progress.current;
    const end = await appendAll(stack, workspaceHistories('bulk', 'org_bulk', 8_000, 5));

    const estimates: number[] = [];
    stack.runner({ bulkCatchUpEvents: 1_000 }).start();
    while (comparePositions(stack.progress.current, checkpoint) === 0) {
      const seconds = stack.progress.secondsToReach(end);
      if (seconds !== undefined) estimates.push(seconds);
      await new Promise((resolve) => setTimeout(resolve, 10));
      await stack.progress.refresh();
    }
    expect(comparePositions(stack.progress.current, end)).toBeGreaterThanOrEqual(0);
    // Told while the bulk load read the log, each with events still left to it.
    expect(estimates.length).toBeGreaterThan(0);
    expect(estimates.filter((seconds) => !(Number.isFinite(seconds) && seconds > 0))).toEqual([]);
    // Done, the pace it told last no longer counts.
    expect(stack.progress.secondsToReach(end)).toBe(0);
  });
});
