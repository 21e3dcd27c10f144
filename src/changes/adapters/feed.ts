import type { GlobalPosition } from '../../eventstore/port.js';
import { waitUnlessAborted } from '../../infra/abort.js';
import type { Pool } from '../../infra/postgres.js';
import { pageOf, type ChangePage, type ChangeQuery } from '../feed.js';
import { readChanges } from './table.js';

/** How far the projection has got, and a wait for it to move (src/projections/progress.ts). */
export type FeedProgress = { readonly current: GlobalPosition; waitPast(position: GlobalPosition, timeoutMs: number): Promise<boolean> };

/**
 * `list_changes` (contract §14). With `waitMs` and nothing after the cursor, it waits for the
 * projection to move (a notification from whichever instance projects, or the checkpoint's poll)
 * and reads again, until a change is there or the time is up. The position is taken before each
 * read, so a batch committed between the read and the wait still ends the wait.
 */
export function createChangeFeed(pool: Pool, progress: FeedProgress) {
  return async (query: ChangeQuery, waitMs: number, signal?: AbortSignal): Promise<ChangePage> => {
    const deadline = performance.now() + waitMs;
    for (;;) {
      const seen = progress.current;
      const rows = await readChanges(pool, query);
      const remaining = deadline - performance.now();
      if (rows.length > 0 || remaining <= 0 || signal?.aborted) return pageOf(rows, query);
      await waitUnlessAborted(progress.waitPast(seen, remaining), signal);
    }
  };
}
