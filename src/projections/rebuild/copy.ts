import pg from 'pg';
import { type EventStore, type GlobalPosition } from '../../eventstore/port.js';
import { readPage } from '../../eventstore/event-log.js';
import type { Envelope } from '../../domain/events.js';
import { applyBatch, rowsNeeded, type BatchChanges, type CountDelta, type LoadedRows } from '../batch.js';
import type { SolutionRow } from '../solutions-table.js';
import { advanceCheckpoint, writeChanges } from '../tables.js';
import type { WorkspaceRow } from '../workspaces-table.js';
import { RowCache } from './row-cache.js';
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

/** Reads and applies batches until a batch comes back short. */
export async function catchUp(
  connections: Connections,
  cache: RowCache,
  store: EventStore,
  state: CopyState,
  batchSize: number,
  signal: AbortSignal | undefined,
  progress: () => void,
): Promise<void> {
  const { writer, solutionWriter, loader } = connections;
  let reading = readPage(store, state.position, batchSize);
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
      const { events, end: to } = await reading;
      if (!to) break;
      const full = events.length >= batchSize;
      reading = full ? readPage(store, to, batchSize) : Promise.resolve({ events: [], end: undefined });
      // Awaited in the next round; a failure meanwhile must not count as unhandled.
      reading.catch(() => undefined);

      const envelopes = events.map((logged) => logged.event);
      const loaded = await cache.load(loader, envelopes, writing?.batch.changes);
      const batch = await foldBatch(from, to, events.length, envelopes, loaded);
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
    await solutions;
  } finally {
    // Lets the solutions' writes end before the caller moves on; their error was thrown above.
    await solutions.catch(() => undefined);
  }
  await moveCheckpoint(writer, batch);
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
  await moveCheckpoint(client, batch);
}

async function moveCheckpoint(client: pg.Client, batch: Batch): Promise<void> {
  if (!(await advanceCheckpoint(client, batch.from, batch.to))) {
    throw new Error('the rebuild checkpoint moved under the rebuild; is another rebuild writing to its schema?');
  }
}

const noChanges = (): BatchChanges => ({
  upsertWorkspaces: [],
  deleteWorkspaces: [],
  upsertSolutions: [],
  deleteSolutions: [],
  organizationDeltas: new Map(),
  workspaceSolutionDeltas: new Map(),
  workspacesDeleted: [],
  pendingCascades: [],
});

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

/** Events per call of applyBatch: it scans a batch's solutions for each workspace deletion. */
const foldChunk = 1000;

/**
 * applyBatch over a whole batch, in chunks over the rows each chunk touches, with the changes
 * combined into one set for the batch: the same result as one call, without one call's cost
 * growing with the square of the batch.
 */
export async function foldBatch(
  from: GlobalPosition,
  to: GlobalPosition,
  count: number,
  envelopes: Envelope[],
  loaded: LoadedRows,
): Promise<Batch> {
  const workspaces = new Map<string, WorkspaceRow | null>(loaded.workspaces);
  const solutions = new Map<string, SolutionRow | null>(loaded.solutions);
  const solutionsOf = new Map<string, Set<string>>();
  const index = (row: SolutionRow) => {
    let ids = solutionsOf.get(row.workspace_id);
    if (!ids) solutionsOf.set(row.workspace_id, (ids = new Set()));
    ids.add(row.id);
  };
  for (const row of loaded.solutions.values()) index(row);

  const organizationDeltas = new Map<string, CountDelta>();
  const workspaceSolutionDeltas = new Map<string, number>();
  const workspacesDeleted: string[] = [];
  const pendingCascades: BatchChanges['pendingCascades'] = [];
  const solutionsDeleted: string[] = [];

  for (let start = 0; start < envelopes.length; start += foldChunk) {
    // Lets the writer's next statement go out between chunks rather than after the whole fold.
    if (start > 0) await new Promise((resolve) => setImmediate(resolve));
    const chunk = envelopes.slice(start, start + foldChunk);
    const needed = rowsNeeded(chunk);
    const chunkRows: LoadedRows = { workspaces: new Map(), solutions: new Map() };
    for (const id of needed.workspaceIds) {
      const row = workspaces.get(id);
      if (row) chunkRows.workspaces.set(id, row);
    }
    for (const id of needed.solutionIds) {
      const row = solutions.get(id);
      if (row) chunkRows.solutions.set(id, row);
    }
    for (const workspaceId of needed.workspacesDeleted) {
      for (const id of solutionsOf.get(workspaceId) ?? []) {
        const row = solutions.get(id);
        if (row) chunkRows.solutions.set(id, row);
      }
    }
    const changes = applyBatch(chunk, chunkRows);
    for (const row of changes.upsertWorkspaces) workspaces.set(row.id, row);
    for (const id of changes.deleteWorkspaces) workspaces.set(id, null);
    for (const row of changes.upsertSolutions) {
      solutions.set(row.id, row);
      index(row);
    }
    for (const id of changes.deleteSolutions) {
      const row = solutions.get(id);
      if (row) solutionsOf.get(row.workspace_id)?.delete(id);
      solutions.set(id, null);
    }
    for (const [organizationId, delta] of changes.organizationDeltas) {
      const sum = organizationDeltas.get(organizationId) ?? { workspaces: 0, solutions: 0 };
      sum.workspaces += delta.workspaces;
      sum.solutions += delta.solutions;
      organizationDeltas.set(organizationId, sum);
    }
    for (const [workspaceId, delta] of changes.workspaceSolutionDeltas) {
      workspaceSolutionDeltas.set(workspaceId, (workspaceSolutionDeltas.get(workspaceId) ?? 0) + delta);
    }
    workspacesDeleted.push(...changes.workspacesDeleted);
    pendingCascades.push(...changes.pendingCascades);
  }
  for (const event of envelopes) if (event.type === 'SolutionDeleted') solutionsDeleted.push(event.data.id);

  const changes: BatchChanges = {
    upsertWorkspaces: [],
    deleteWorkspaces: [],
    upsertSolutions: [],
    deleteSolutions: [],
    organizationDeltas,
    workspaceSolutionDeltas,
    workspacesDeleted,
    pendingCascades,
  };
  for (const [id, after] of workspaces) {
    const before = loaded.workspaces.get(id) ?? null;
    if (after === before) continue;
    if (after) changes.upsertWorkspaces.push(after);
    else if (before) changes.deleteWorkspaces.push(id);
  }
  for (const [id, after] of solutions) {
    const before = loaded.solutions.get(id) ?? null;
    if (after === before) continue;
    if (after) changes.upsertSolutions.push(after);
    else if (before) changes.deleteSolutions.push(id);
  }
  return { from, to, events: count, changes, solutionsDeleted };
}
