import pg from 'pg';
import { changeEntriesOf, type FeedEvent } from '../../changes/feed.js';
import type { EventStore, GlobalPosition } from '../../eventstore/port.js';
import { readPage, type Page, type SkippedEvents, type UnreadableEvent } from '../../eventstore/event-log.js';
import type { Envelope } from '../../domain/events.js';
import { applyBatch, noChanges, type BatchChanges, type LoadedRows } from '../batch.js';
import { advanceCheckpoint, writeChanges } from '../tables.js';
import { RowCache } from '../row-cache.js';
import { RebuildAborted, type CopyState } from './types.js';

// ---------------------------------------------------------------------------------------------
// The copy: a pipeline of three steps on three connections. While the writer writes batch k,
// the loader reads the rows batch k+1 needs (their state in the tables, overlaid with batch k's
// changes, which may or may not be committed yet) and the store reads batch k+2.

/** What one batch does, written by `writeBatch` and taken into CopyState by `commit`. */
export type Batch = {
  from: GlobalPosition;
  to: GlobalPosition;
  events: number;
  changes: BatchChanges;
  /** Ids of the solutions this batch deletes with their own event. */
  solutionsDeleted: string[];
};

export type Connections = { writer: pg.Client; solutionWriter: pg.Client; loader: pg.Client };

/**
 * A page of the log for the rebuild, which follows the live projector's policy: it leaves out the
 * events operators skipped, and cannot go past one of the service's own it cannot read.
 */
export async function readCopyPage(store: EventStore, after: GlobalPosition, batchSize: number, skipped: SkippedEvents): Promise<Page> {
  const page = await readPage(store, after, batchSize, skipped);
  if (page.unreadable) throw stoppedAt(page.unreadable);
  return page;
}

/** The rebuild's failure at an event of the service's own it cannot read and nobody skipped. */
export const stoppedAt = (unreadable: UnreadableEvent): Error =>
  new Error(`the rebuild stopped at an event it cannot apply: ${unreadable.message}; resolve it with npm run projections:dead-letters`);

/** Reads and applies batches until a batch comes back short. */
export async function catchUp(options: {
  connections: Connections;
  cache: RowCache;
  store: EventStore;
  /** Where the copy is; moved as batches commit. */
  state: CopyState;
  batchSize: number;
  /** Events operators skipped (projections_dead_letters), left out as the live projector left them out. */
  skipped: SkippedEvents;
  signal: AbortSignal | undefined;
  progress: () => void;
}): Promise<void> {
  const { connections, cache, store, state, batchSize, skipped, signal, progress } = options;
  const { writer, solutionWriter, loader } = connections;
  // Each page is read while the one before it is applied, and awaited in the next round: a read
  // that fails meanwhile, or that no round awaits (the loop stopped), must not count as unhandled.
  const readAhead = (from: GlobalPosition): Promise<Page> => {
    const page = readCopyPage(store, from, batchSize, skipped);
    page.catch(() => undefined);
    return page;
  };
  let reading = readAhead(state.position);
  let writing: { batch: Batch; done: Promise<void> } | undefined;
  const settle = async () => {
    if (!writing) return;
    await writing.done;
    commit(state, writing.batch);
    writing = undefined;
    progress();
    if (isPowerOfTwo(state.batches)) await analyze(writer);
  };
  try {
    let from = state.position;
    for (;;) {
      if (signal?.aborted) throw new RebuildAborted();
      const { events, end: to, read } = await reading;
      if (!to) break;
      // A page that covered `batchSize` events is full even if some were another program's, left out.
      const full = read >= batchSize;
      reading = full ? readAhead(to) : Promise.resolve({ events: [], end: undefined, read: 0 });

      const envelopes = events.map((logged) => logged.event);
      const loaded = await cache.load(loader, envelopes, writing?.batch.changes);
      const batch = foldBatch({ from, to, count: read, events, envelopes, loaded });
      cache.remember(batch.changes, loaded);
      await settle();
      writing = { batch, done: writeBatch(writer, solutionWriter, batch) };
      // Awaited by settle() or the finally below; a failure meanwhile must not count as unhandled.
      writing.done.catch(() => undefined);
      from = to;
      if (!full) break;
    }
    await settle();
  } finally {
    // On an error, let the batch in flight finish (or fail) before the caller rolls back.
    await writing?.done.catch(() => undefined);
  }
}

const isPowerOfTwo = (n: number) => n > 0 && (n & (n - 1)) === 0;

/** Fresh statistics while the tables grow from nothing, so that loading keeps using the indexes. */
async function analyze(client: pg.Client): Promise<void> {
  await client.query('ANALYZE workspaces');
  await client.query('ANALYZE solutions');
}

/**
 * Rows per statement. Every statement holds a transaction id while it runs, and the PostgreSQL
 * event store shows no event committed after the oldest running one (pg_snapshot_xmin): a long
 * write here would hold back the live projector, and so every command waiting for it.
 */
const rowsPerStatement = 2000;

/**
 * Writes a batch set-based, in statements of at most `rowsPerStatement` rows that commit one by
 * one: its solutions on one connection, its workspaces then its counts on the other, and last
 * its checkpoint, once all of them are in. So the rebuild schema's checkpoint never claims a batch
 * that is not wholly written. (The schema is private to this rebuild and dropped if it fails.)
 */
async function writeBatch(writer: pg.Client, solutionWriter: pg.Client, batch: Batch): Promise<void> {
  const {
    upsertWorkspaces,
    deleteWorkspaces,
    upsertSolutions,
    deleteSolutions,
    organizationDeltas,
    workspaceSolutionDeltas,
    workspacesDeleted,
    feed = [],
  } = batch.changes;
  const solutions = (async () => {
    for (const slice of slices(deleteSolutions)) await writeChanges(solutionWriter, { ...noChanges(), deleteSolutions: slice });
    for (const slice of slices(upsertSolutions)) await writeChanges(solutionWriter, { ...noChanges(), upsertSolutions: slice });
  })();
  // Awaited below; a failure meanwhile must not count as unhandled.
  solutions.catch(() => undefined);
  try {
    for (const slice of slices(deleteWorkspaces)) await writeChanges(writer, { ...noChanges(), deleteWorkspaces: slice });
    for (const slice of slices(upsertWorkspaces)) await writeChanges(writer, { ...noChanges(), upsertWorkspaces: slice });
    for (const slice of slices([...workspaceSolutionDeltas])) {
      await writeChanges(writer, { ...noChanges(), workspaceSolutionDeltas: new Map(slice) });
    }
    // After the deltas: a deleted workspace's count goes. (Cascades are kept in memory and handed
    // to the live cascade_pending at the switch.)
    await writeChanges(writer, { ...noChanges(), organizationDeltas, workspacesDeleted });
    // In log order, one slice after another: an update's keys are read from its record's first row.
    for (const slice of slices(feed)) await writeChanges(writer, { ...noChanges(), feed: slice });
    await solutions;
  } finally {
    // Lets the solutions' writes end before the caller moves on; their error was thrown above.
    await solutions.catch(() => undefined);
  }
  await moveCheckpoint(writer, batch.from, batch.to);
}

function slices<T>(items: T[]): T[][] {
  const result: T[][] = [];
  for (let start = 0; start < items.length; start += rowsPerStatement) result.push(items.slice(start, start + rowsPerStatement));
  return result;
}

/** Writes a batch in the caller's transaction, on one connection (the switch's tail). */
export async function writeBatchInTransaction(client: pg.Client, batch: Batch): Promise<void> {
  // Cascades are kept in memory and handed to the live cascade_pending at the switch.
  await writeChanges(client, { ...batch.changes, pendingCascades: [] });
  await moveCheckpoint(client, batch.from, batch.to);
}

/** Moves the rebuild's checkpoint, which only this rebuild may have moved since `from`. */
export async function moveCheckpoint(client: pg.Client, from: GlobalPosition, to: GlobalPosition): Promise<void> {
  if (!(await advanceCheckpoint(client, from, to))) {
    throw new Error('the rebuild checkpoint moved under the rebuild; is another rebuild writing to its schema?');
  }
}

/**
 * Takes over a written batch once it is committed. A cascade listed in a batch is always listed
 * before that solution's own SolutionDeleted (it is hidden while still active, or created after
 * its workspace was deleted), so adding before removing is right within a batch too.
 */
export function commit(state: CopyState, batch: Batch): void {
  for (const c of batch.changes.pendingCascades) state.cascades.set(c.solution_id, c.workspace_id);
  for (const solutionId of batch.solutionsDeleted) state.cascades.delete(solutionId);
  state.position = batch.to;
  state.done += batch.events;
  state.batches += 1;
}

/**
 * One batch folded by the live projector's own fold (applyBatch, src/projections/batch.ts), over
 * the rows it needs: the rebuild and the projector cannot disagree on what an event does. The
 * solutions deleted in the batch leave the rebuild's list of cascades still to do.
 */
export function foldBatch(batch: {
  from: GlobalPosition;
  to: GlobalPosition;
  /** Log entries the batch covers. */
  count: number;
  /** The batch's events with their positions, for the change feed's rows... */
  events: FeedEvent[];
  /** ...and the same events alone, as the fold reads them. */
  envelopes: Envelope[];
  loaded: LoadedRows;
}): Batch {
  const { from, to, count, events, envelopes, loaded } = batch;
  const changes = { ...applyBatch(envelopes, loaded), feed: changeEntriesOf(events) };
  const solutionsDeleted = envelopes.flatMap((event) => (event.type === 'SolutionDeleted' ? [event.data.id] : []));
  return { from, to, events: count, changes, solutionsDeleted };
}
