import { hash } from 'node:crypto';
import { comparePositions, type GlobalPosition } from '../../eventstore/port.js';
import type { Pool } from '../../infra/postgres.js';
import {
  changeOf,
  changeTypes,
  continuesFrom,
  pageOf,
  type Change,
  type ChangePage,
  type ChangeQuery,
  type PageRows,
  type StoredChange,
} from '../feed.js';
import { lastChangeThrough, readChanges } from './table.js';

/** How far the projection has got, and a wait for it to move (src/projections/progress.ts). */
export type FeedProgress = {
  readonly current: GlobalPosition;
  waitPast(position: GlobalPosition, timeoutMs: number, signal?: AbortSignal): Promise<boolean>;
};

/**
 * `list_changes` (contract §14). With `waitMs` and nothing after the cursor, it waits for the
 * projection to move (a notification from whichever instance projects, or the checkpoint's poll)
 * and reads again, until a change is there or the time is up. The position is taken before each
 * read, so a batch committed between the read and the wait still ends the wait.
 *
 * Identical reads under way at the same position share one: the open streams of an organization,
 * all woken by the same batch at the same cursor, cost one statement rather than one each, and
 * get the same Change objects (never changed after: each is shown as it is). Only reads begun at
 * the same position are shared, so each still sees every batch its waiter saw.
 *
 * A page that held everything there was (not `has_more`) is remembered with the position it was
 * read at: a waiting call that continues from it (a stream's next turn, a long poll following
 * `next`) waits for the projection to move past that position before it reads, rather than
 * reading the nothing it would find first. Every call still reads before it answers.
 */
export function createChangeFeed(pool: Pool, progress: FeedProgress) {
  const reading = new Map<string, Promise<PageRows>>();
  // A row read once for several callers is shown once: the streams woken together share their Changes.
  const shown = new WeakMap<StoredChange, Change>();
  const present = (row: StoredChange): Change => {
    let change = shown.get(row);
    if (!change) shown.set(row, (change = changeOf(row)));
    return change;
  };
  const keyOf = (query: ChangeQuery) =>
    JSON.stringify([query.after, query.organizations, query.workspaceId ?? null, query.types, query.limit], (_, value) =>
      typeof value === 'bigint' ? value.toString() : (value as unknown),
    );
  const read = (query: ChangeQuery, seen: GlobalPosition): Promise<PageRows> => {
    const key = `${seen.commit}/${seen.prepare} ${keyOf(query)}`;
    let rows = reading.get(key);
    if (!rows) {
      rows = readChanges(pool, query)
        .then(async (read) =>
          // Read to the end with some types left out: continue past those too (lastChangeThrough).
          read.more || query.types.length === changeTypes.length ? read : { ...read, through: await lastChangeThrough(pool, query, seen) },
        )
        .finally(() => reading.delete(key));
      reading.set(key, rows);
    }
    return rows;
  };
  /**
   * By the query that continues a page that held everything there was (its key's digest: a
   * caller of many organizations has a long key): the position it was read at. Oldest first,
   * bounded; one the projection has passed imposes nothing.
   */
  const readTo = new Map<string, GlobalPosition>();
  const digestOf = (query: ChangeQuery) => hash('sha256', keyOf(query), 'base64');
  const remember = (query: ChangeQuery, read: PageRows, seen: GlobalPosition) => {
    if (read.more) return;
    const key = digestOf({ ...query, after: continuesFrom(read, query) });
    readTo.delete(key);
    readTo.set(key, seen);
    for (const key of readTo.keys()) {
      if (readTo.size <= rememberedPages) break;
      readTo.delete(key);
    }
  };
  return async (query: ChangeQuery, waitMs: number, signal?: AbortSignal): Promise<ChangePage> => {
    const deadline = performance.now() + waitMs;
    const known = readTo.get(digestOf(query));
    if (known !== undefined && waitMs > 0 && comparePositions(progress.current, known) <= 0) {
      await progress.waitPast(known, waitMs, signal);
    }
    for (;;) {
      const seen = progress.current;
      const rows = await read(query, seen);
      const remaining = deadline - performance.now();
      if (rows.rows.length > 0 || remaining <= 0 || signal?.aborted) {
        remember(query, rows, seen);
        return pageOf(rows, query, present);
      }
      await progress.waitPast(seen, remaining, signal);
    }
  };
}

/** Pages remembered as read to the end (see createChangeFeed): more than the streams and long polls open at once. */
const rememberedPages = 10_000;
