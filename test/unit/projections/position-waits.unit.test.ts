import { getEventListeners } from 'node:events';
import { describe, expect, it, vi } from 'vitest';
import { PositionWaits } from '../../../src/projections/position-waits.js';

const at = (commit: number, prepare: number) => ({ commit: BigInt(commit), prepare: BigInt(prepare) });

/** Whether the promise has settled, and how, without waiting for it. */
async function state(promise: Promise<boolean>): Promise<boolean | 'pending'> {
  return Promise.race([promise, new Promise<'pending'>((resolve) => setImmediate(() => resolve('pending')))]);
}

describe('PositionWaits', () => {
  it('given a wait for a position and one past it, when positions before, at and after are reached, then each ends true at its own', async () => {
    const waits = new PositionWaits();
    const forIt = waits.wait(at(5, 10), 60_000);
    const pastIt = waits.waitPast(at(5, 10), 60_000);
    waits.reach(at(5, 9));
    expect([await state(forIt), await state(pastIt)]).toEqual(['pending', 'pending']);
    waits.reach(at(5, 10));
    expect([await state(forIt), await state(pastIt)]).toEqual([true, 'pending']);
    waits.reach(at(6, 0));
    expect(await state(pastIt)).toBe(true);
    expect(waits.size).toBe(0);
  });

  it('given a wait whose time runs out, then it ends false after its onTimeout has run', async () => {
    vi.useFakeTimers();
    try {
      const waits = new PositionWaits();
      const timedOut: string[] = [];
      const reached = waits.wait(at(1, 1), 1_000, { onTimeout: () => timedOut.push('timed out') });
      vi.advanceTimersByTime(999);
      expect(timedOut).toEqual([]);
      vi.advanceTimersByTime(1);
      expect(timedOut).toEqual(['timed out']);
      await expect(reached).resolves.toBe(false);
      expect(waits.size).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });

  it('given waits on a long-lived signal, when one is reached and another aborted, then each ends and leaves no listener on the signal', async () => {
    const waits = new PositionWaits();
    const controller = new AbortController();
    const reached = waits.waitPast(at(1, 1), 60_000, controller.signal);
    waits.reach(at(1, 2));
    await expect(reached).resolves.toBe(true);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    const aborted = waits.waitPast(at(1, 2), 60_000, controller.signal);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1);
    controller.abort();
    await expect(aborted).resolves.toBe(false);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    await expect(waits.waitPast(at(1, 2), 60_000, controller.signal)).resolves.toBe(false);
    expect(waits.size).toBe(0);
  });

  it('given a wait and a wait for news, when the owner ends those not for news and then all, then the wait for news ends only the second time', async () => {
    const waits = new PositionWaits();
    const command = waits.wait(at(3, 3), 60_000);
    const news = waits.waitPast(at(3, 3), 60_000);
    waits.end(false);
    expect([await state(command), await state(news)]).toEqual([false, 'pending']);
    waits.end(true);
    expect(await state(news)).toBe(false);
  });
});
