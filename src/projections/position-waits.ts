import { comparePositions, type GlobalPosition } from '../eventstore/port.js';

/** What a wait ends with: true when the position was reached, false otherwise. */
type Wait = { position: GlobalPosition; news: boolean; settle: (reached: boolean) => void };

/**
 * Waits for the projection to reach a position, as one instance hears of its progress: the
 * service's ProjectionProgress, and the webhook delivery thread's copy of it. Each wait ends true
 * once `reach` is told of a position at or past its own, false when its time runs out, its signal
 * aborts or its owner ends it; its timer and its listener on the signal go with it (a long-lived
 * signal, a stream's or the dispatcher's, is waited on again and again).
 */
export class PositionWaits {
  private readonly waits = new Set<Wait>();

  /** How many waits are in progress. */
  get size(): number {
    return this.waits.size;
  }

  /**
   * A wait for `position` of at most `timeoutMs`, ended false at once if `signal` is aborted
   * already. `onTimeout` runs when the time runs out, before the wait ends. `news`: a wait for the
   * projection to move (a long poll), which `end` may leave running.
   */
  wait(
    position: GlobalPosition,
    timeoutMs: number,
    options: { signal?: AbortSignal | undefined; onTimeout?: () => void; news?: boolean } = {},
  ): Promise<boolean> {
    const { signal, onTimeout, news = false } = options;
    if (signal?.aborted) return Promise.resolve(false);
    return new Promise((resolve) => {
      const abandon = () => wait.settle(false);
      const timer = setTimeout(() => {
        onTimeout?.();
        wait.settle(false);
      }, timeoutMs);
      const wait: Wait = {
        position,
        news,
        settle: (reached) => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', abandon);
          this.waits.delete(wait);
          resolve(reached);
        },
      };
      signal?.addEventListener('abort', abandon, { once: true });
      this.waits.add(wait);
    });
  }

  /**
   * A wait until the projection has moved past `position`: a wait for the position just after it
   * (positions are whole numbers, compared commit first), for news.
   */
  waitPast(position: GlobalPosition, timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
    return this.wait({ commit: position.commit, prepare: position.prepare + 1n }, timeoutMs, { signal, news: true });
  }

  /** Ends true every wait for `position` or before it. */
  reach(position: GlobalPosition): void {
    for (const wait of this.waits) if (comparePositions(position, wait.position) >= 0) wait.settle(true);
  }

  /** Ends false every wait (`waitsForNews`: also those for news). */
  end(waitsForNews: boolean): void {
    for (const wait of this.waits) if (waitsForNews || !wait.news) wait.settle(false);
  }
}
