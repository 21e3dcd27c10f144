import { latestPosition, type GlobalPosition } from '../eventstore/port.js';
import type { Timestamp } from '../domain/timestamp.js';

type Creation = { createdAt: Timestamp; appended: Promise<GlobalPosition | undefined> };

/**
 * Keeps list paging stable (contract §9): a record must never appear before one with an earlier
 * `created_at` that is still on its way. Creations take their time before they append, and two
 * appends can commit in either order; so a creation is acknowledged only once every creation of
 * this instance that took an earlier time has been appended and projected too. (Across instances
 * the same holds as far as their clocks agree.)
 */
export class CreationOrder {
  private readonly inFlight = new Set<Creation>();

  /** Registers a creation that took `createdAt` (from a clock that never goes backwards). */
  track(createdAt: Timestamp, appended: Promise<GlobalPosition | undefined>): () => void {
    // A creation that failed to append has nothing later creations must wait for.
    const creation = { createdAt, appended: appended.catch(() => undefined) };
    this.inFlight.add(creation);
    return () => this.inFlight.delete(creation);
  }

  /**
   * The furthest position among creations that took an earlier time, once they have all appended,
   * or, after `timeoutMs`, among those that have (the rest still count as not appended).
   */
  async earlierAppended(createdAt: Timestamp, timeoutMs: number): Promise<GlobalPosition | undefined> {
    const earlier = [...this.inFlight].filter((creation) => creation.createdAt < createdAt);
    const appended: (GlobalPosition | undefined)[] = [];
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    try {
      await Promise.race([
        Promise.all(earlier.map((creation) => creation.appended.then((position) => void appended.push(position)))),
        timedOut,
      ]);
    } finally {
      clearTimeout(timer);
    }
    return latestPosition(appended);
  }
}
