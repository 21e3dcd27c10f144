import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { GlobalPosition } from '../../../src/eventstore/port.js';
import { InMemoryEventStore } from '../../../src/eventstore/in-memory.js';
import { createClock } from '../../../src/infra/clock.js';
import type { CascadeWorker } from '../../../src/write/cascade.js';
import { CommandHandlers, type Caller } from '../../../src/write/handlers.js';

const projectionWaitMs = 1000;
/** Where the cascade's deletions end in the log: past anything the workspace's own events reach. */
const cascadeEnd: GlobalPosition = { commit: 1_000_000n, prepare: 1_000_000n };

/** A timer may fire up to a millisecond early by the monotonic clock the budget is counted on. */
const timerSlackMs = 1;

type Wait = { position: GlobalPosition; timeoutMs: number };

/**
 * delete_workspace's waits (contract §11 and §14): first for the workspace's deletion, then for its
 * solutions' own deletions, all within one PROJECTION_WAIT_MS. The projection and the cascade are
 * stand-ins here: what is checked is what the command asks of them, and what it tells its caller.
 */
function deletion(options: {
  /** How the projection answers each wait in turn: reached or not, after how long. */
  projection: { reached: boolean; afterMs: number }[];
  cascade: { latest: GlobalPosition | undefined; failure?: unknown; unfinished?: true };
}) {
  const waits: Wait[] = [];
  let deleting = false;
  let drainedAll = 0;
  const drainedWithin: number[] = [];
  const cascade = {
    drainWorkspace: async (_workspaceId: string, withinMs: number) => {
      drainedWithin.push(withinMs);
      return options.cascade;
    },
    drainAll: () => {
      drainedAll += 1;
    },
  } as unknown as CascadeWorker;
  const handlers = new CommandHandlers({
    store: new InMemoryEventStore(),
    cascade,
    clock: createClock(),
    newId: (prefix) => `${prefix}waits${Math.random().toString(36).slice(2, 12)}`,
    awaitProjection: async (position, timeoutMs) => {
      // The workspace's creation is projected at once; the deletion's waits are answered as given.
      if (!deleting) return true;
      const answer = options.projection[waits.length] ?? { reached: true, afterMs: 0 };
      waits.push({ position, timeoutMs });
      await new Promise((resolve) => setTimeout(resolve, answer.afterMs));
      return answer.reached;
    },
    projectionWaitMs,
    logger: pino({ level: 'silent' }),
    recordQueueLimit: 10,
  });
  let behind = 0;
  const caller: Caller = {
    subject: 'user-1',
    organizations: new Set(['org_waits']),
    requestId: 'request-1',
    onProjectionBehind: () => {
      behind += 1;
    },
  };
  return {
    run: async () => {
      const { id } = await handlers.createWorkspace({ organization_id: 'org_waits', name: 'doomed' }, caller);
      deleting = true;
      return handlers.deleteWorkspace(id, caller);
    },
    waits,
    behind: () => behind,
    drainedAll: () => drainedAll,
    drainedWithin,
  };
}

describe('delete_workspace waits for its cascade within the one wait a command has', () => {
  it('given the deletion projected, when the cascade wrote its deletions, then it waits for the latest of them with what is left', async () => {
    const given = deletion({ projection: [{ reached: true, afterMs: 200 }], cascade: { latest: cascadeEnd } });
    await given.run();
    expect(given.waits.map((wait) => wait.position)).toEqual([expect.anything(), cascadeEnd]);
    expect(given.waits[0]!.timeoutMs).toBe(projectionWaitMs);
    expect(given.waits[1]!.timeoutMs).toBeLessThanOrEqual(projectionWaitMs - 200 + timerSlackMs);
    expect(given.behind()).toBe(0);
  });

  it('given the cascade not projected in time, then the answer says the projection is behind', async () => {
    const given = deletion({
      projection: [
        { reached: true, afterMs: 0 },
        { reached: false, afterMs: 0 },
      ],
      cascade: { latest: cascadeEnd },
    });
    await given.run();
    expect(given.waits).toHaveLength(2);
    expect(given.behind()).toBe(1);
  });

  it('given the deletion itself not projected in time, then it does not wait again: the answer already says so', async () => {
    const given = deletion({ projection: [{ reached: false, afterMs: 0 }], cascade: { latest: cascadeEnd } });
    await given.run();
    expect(given.waits).toHaveLength(1);
    expect(given.behind()).toBe(1);
  });

  it('given a cascade that failed half-way, then it waits for what was written and leaves the rest to the background', async () => {
    const given = deletion({ projection: [], cascade: { latest: cascadeEnd, failure: new Error('the event store refused') } });
    expect(await given.run()).toEqual({ id: expect.stringMatching(/^ws_/) });
    expect(given.waits.map((wait) => wait.position)).toEqual([expect.anything(), cascadeEnd]);
    expect(given.drainedAll()).toBe(1);
    expect(given.behind()).toBe(1);
  });

  it('given the deletion projected, then the cascade is written within what is left of the budget', async () => {
    const given = deletion({ projection: [{ reached: true, afterMs: 300 }], cascade: { latest: cascadeEnd } });
    await given.run();
    expect(given.drainedWithin).toHaveLength(1);
    expect(given.drainedWithin[0]).toBeLessThanOrEqual(projectionWaitMs - 300 + timerSlackMs);
  });

  it('given a cascade the budget ran out on, then it answers at once, says the projection is behind and leaves the rest to the background', async () => {
    const given = deletion({ projection: [], cascade: { latest: cascadeEnd, unfinished: true } });
    expect(await given.run()).toEqual({ id: expect.stringMatching(/^ws_/) });
    expect(given.waits).toHaveLength(1);
    expect(given.behind()).toBe(1);
    expect(given.drainedAll()).toBe(1);
  });

  it('given a workspace without solutions, then it waits once', async () => {
    const given = deletion({ projection: [], cascade: { latest: undefined } });
    await given.run();
    expect(given.waits).toHaveLength(1);
  });
});
