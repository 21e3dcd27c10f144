import pg from 'pg';
import type { Logger } from 'pino';
import { comparePositions, startOfLog, type EventStore, type GlobalPosition } from '../eventstore/port.js';
import { readPage } from '../eventstore/event-log.js';
import { lockKeys } from '../infra/lock-keys.js';
import { connectionSettings } from '../infra/postgres.js';
import type { Envelope } from '../domain/events.js';
import { applyBatch, rowsNeeded, type BatchChanges, type CountDelta, type LoadedRows, type RowsNeeded } from './batch.js';
import { encodePosition, progressChannel } from './progress.js';
import { readModelSchema } from './schema.js';
import type { SolutionRow } from './solutions-table.js';
import { advanceCheckpoint, loadRows, projectorName, writeChanges } from './tables.js';
import type { WorkspaceRow } from './workspaces-table.js';

/**
 * Rebuilds every read table from the event log while the service keeps running.
 *
 * 1. A fresh schema `read_rebuild_<time>` gets the read tables (readModelSchema with search_path
 *    set to it); the table code in tables.ts uses unqualified names, so the projector's own
 *    loadRows/applyBatch/writeChanges work there unchanged. Indexes only readers use are dropped
 *    and built once after the bulk of the copy.
 * 2. Every event is projected into it in large batches, pipelined: while batch k is written, the
 *    rows batch k+1 needs are loaded (mostly from an in-memory cache of rows the rebuild wrote)
 *    and batch k+2 is read from the store. Each batch is written set-based by writeChanges, on
 *    two connections side by side (solutions; workspaces and counts), in statements of bounded
 *    size that commit one by one, and the rebuild's checkpoint last. The live tables keep
 *    answering and the live projector keeps running meanwhile.
 * 3. Close to the head, one transaction switches over: it locks the live tables (readers and the
 *    live projector wait a moment), applies the rest of the log up to the head, drops the live
 *    tables, moves the new ones into `public` (their indexes with them), sets the live checkpoint
 *    to where the rebuild got (never behind the old one) and announces it on the progress
 *    channel. The live projector's next checkpoint move then fails (it is not at the position
 *    that projector read) and it restarts from the new checkpoint; commands waiting for their
 *    position are released by the announcement. If the locks cannot be had at once, the switch
 *    gives up within a fraction of deadlock_timeout, catches up and tries again.
 *
 * Not swapped: `cascade_pending`, the cascade worker's to-do list, stays; the cascades the rebuild
 * found still to do (no SolutionDeleted in the log yet) are added to it. `projection_checkpoints`
 * stays too (other projectors may keep theirs there); only this projector's row is set.
 */

const schemaPrefix = 'read_rebuild_';
/** Tables of the rebuild schema that are not moved into `public`. */
const keptLive = new Set(['cascade_pending', 'projection_checkpoints']);
/** Lock order of the live tables; any others (added later to readModelSchema) follow by name. */
const lockOrder = ['workspaces', 'solutions', 'organization_counts', 'workspace_solution_counts'];

export type RebuildProgress = {
  phase: 'copying' | 'switching' | 'done';
  /** Events read from the log so far (all of them, also those of streams the projection ignores). */
  done: number;
  /** An estimate of the log's length, when the store can give one; never below `done`. */
  total: number | undefined;
  elapsedMs: number;
};

export type RebuildOptions = {
  connectionString: string;
  store: EventStore;
  logger: Logger;
  /** Events read and applied per batch (default 20,000). */
  batchSize?: number;
  /** An estimate of the number of events in the log, for progress; undefined when unknown. */
  estimateTotal?: () => Promise<number | undefined>;
  onProgress?: (progress: RebuildProgress) => void;
  /** Stops the rebuild between batches; the live tables stay as they were. */
  signal?: AbortSignal;
  /** Called each time the rebuild has caught up, just before it tries to switch over (tests). */
  beforeSwitch?: () => Promise<void>;
  /**
   * Rows kept in memory between batches (default 250,000), so that most batches read none from
   * the tables; those not kept are read back. Only the rebuild writes its tables, so a kept row
   * is always current.
   */
  cachedRows?: number;
  /** How many times to try taking the live tables' locks before giving up (default 200). */
  maxSwitchAttempts?: number;
};

export type RebuildResult = {
  schema: string;
  /** Events read from the log. */
  events: number;
  /** The live checkpoint before the switch and the one the rebuilt tables are at. */
  previousPosition: GlobalPosition;
  position: GlobalPosition;
  /** Tables moved into `public`. */
  tables: string[];
  /** Cascades still to do that were added to cascade_pending. */
  pendingCascades: number;
  switchAttempts: number;
  elapsedMs: number;
  eventsPerSecond: number;
};

export class RebuildAborted extends Error {
  constructor() {
    super('the rebuild was stopped; the live tables are unchanged');
    this.name = 'RebuildAborted';
  }
}

const quote = (identifier: string) => pg.escapeIdentifier(identifier);

function schemaNameFor(date: Date): string {
  const stamp = date
    .toISOString()
    .replace(/[-:TZ.]/g, '')
    .slice(0, 17); // yyyymmddhhmmssSSS
  return `${schemaPrefix}${stamp}`;
}

export async function rebuildReadModel(options: RebuildOptions): Promise<RebuildResult> {
  const { store, logger, signal } = options;
  const batchSize = options.batchSize ?? 20_000;
  const started = performance.now();
  const connect = async () => {
    const client = new pg.Client({ connectionString: options.connectionString, ...connectionSettings });
    client.on('error', (error) => logger.warn({ err: error.message }, 'rebuild connection lost'));
    await client.connect();
    // Parallel workers would take the cores the service and the rebuild's own pipeline use, for
    // scans of a few thousand rows by key; and the tables being built are in memory. A rebuild
    // that dies half-way is thrown away, so its commits need not wait for the disk.
    await client.query('SET max_parallel_workers_per_gather = 0; SET random_page_cost = 1.1; SET jit = off; SET synchronous_commit = off');
    return client;
  };
  // Three connections: the writer writes workspaces, counts and the checkpoint (and does the
  // switch), the solution writer writes solutions beside it, and the loader reads the rows the
  // next batch needs meanwhile; so PostgreSQL's work is spread over its cores and overlaps Node's.
  const writer = await connect();
  const helpers: pg.Client[] = [];

  const schema = schemaNameFor(new Date());
  let schemaCreated = false;
  try {
    const { rows } = await writer.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [lockKeys.rebuild]);
    if (!rows[0]?.locked) throw new Error('another rebuild is running on this database');
    await dropStaleSchemas(writer, logger);

    await writer.query(`CREATE SCHEMA ${quote(schema)}`);
    schemaCreated = true;
    await writer.query(`SET search_path TO ${quote(schema)}`);
    await writer.query(readModelSchema);
    const tables = await swappedTables(writer, schema);
    const deferredIndexes = await dropIndexesNotNeededToLoad(writer, schema);
    logger.info({ schema, tables, deferredIndexes: deferredIndexes.map((index) => index.name) }, 'rebuild schema created');
    for (let i = 0; i < 2; i++) {
      const helper = await connect();
      helpers.push(helper);
      await helper.query(`SET search_path TO ${quote(schema)}`);
    }
    const [solutionWriter, loader] = helpers as [pg.Client, pg.Client];

    // The estimate only sizes the progress bar; without it progress shows counts.
    let total = await options.estimateTotal?.().catch(() => undefined);
    const state: CopyState = { position: startOfLog, done: 0, batches: 0, cascades: new Map() };
    const report = (phase: RebuildProgress['phase']) =>
      options.onProgress?.({
        phase,
        done: state.done,
        total: total === undefined ? undefined : Math.max(total, state.done),
        elapsedMs: performance.now() - started,
      });
    report('copying');

    const cache = new RowCache(options.cachedRows ?? 250_000);
    const copy = () => catchUp({ writer, solutionWriter, loader }, cache, store, state, batchSize, signal, () => report('copying'));
    await copy();
    // Indexes only the readers need are built once, over the bulk of the rows, then kept up.
    for (const index of deferredIndexes) await writer.query(index.definition);
    for (const table of tables) await writer.query(`ANALYZE ${quote(table)}`);
    await copy();

    const maxAttempts = options.maxSwitchAttempts ?? 200;
    const lockTimeoutMs = await lockTimeoutFor(writer);
    for (let attempt = 1; ; attempt++) {
      if (signal?.aborted) throw new RebuildAborted();
      await options.beforeSwitch?.();
      report('switching');
      const switched = await trySwitch(writer, store, schema, tables, state, batchSize, lockTimeoutMs, logger);
      if (switched) {
        await writer.query('RESET search_path');
        await writer.query(`DROP SCHEMA IF EXISTS ${quote(schema)} CASCADE`);
        schemaCreated = false;
        total = state.done;
        report('done');
        const elapsedMs = performance.now() - started;
        const result: RebuildResult = {
          schema,
          events: state.done,
          previousPosition: switched.previous,
          position: state.position,
          tables,
          pendingCascades: switched.pendingCascades,
          switchAttempts: attempt,
          elapsedMs,
          eventsPerSecond: elapsedMs > 0 ? (state.done / elapsedMs) * 1000 : 0,
        };
        logger.info(
          { ...result, previousPosition: encodePosition(result.previousPosition), position: encodePosition(result.position) },
          'read tables rebuilt and switched over',
        );
        return result;
      }
      if (attempt >= maxAttempts) {
        throw new Error(`could not lock the live read tables in ${attempt} attempts; the live tables are unchanged`);
      }
      logger.debug({ attempt }, 'live read tables busy; catching up and trying again');
      // Readers and the live projector get their turn; then catch up with what was appended meanwhile.
      await sleep(20 + Math.random() * 80 * Math.min(attempt, 5));
      await copy();
    }
  } catch (error) {
    // Clean-up after a failure, which is what gets reported: each step only releases what is
    // being discarded anyway. Helpers are closed first, so that nothing they may still hold keeps
    // the schema from being dropped.
    for (const helper of helpers.splice(0)) await helper.end().catch(() => undefined);
    await writer.query('ROLLBACK').catch(() => undefined);
    if (schemaCreated) {
      await writer.query('RESET search_path').catch(() => undefined);
      await writer.query(`DROP SCHEMA IF EXISTS ${quote(schema)} CASCADE`).catch(() => undefined);
    }
    throw error;
  } finally {
    // Releasing connections and the lock of a rebuild that is over: the session's end frees them anyway.
    for (const helper of helpers) await helper.end().catch(() => undefined);
    await writer.query('SELECT pg_advisory_unlock($1)', [lockKeys.rebuild]).catch(() => undefined);
    await writer.end().catch(() => undefined);
  }
}

type CopyState = {
  position: GlobalPosition;
  done: number;
  batches: number;
  /**
   * Solutions hidden with their workspace whose own SolutionDeleted is not in the log yet (the
   * cascade worker's to-do list as the log stands), by solution id, with their workspace id.
   */
  cascades: Map<string, string>;
};

/** Schemas left by a rebuild that died; only called while holding the rebuild lock. */
async function dropStaleSchemas(client: pg.Client, logger: Logger): Promise<void> {
  const { rows } = await client.query<{ name: string }>(`SELECT nspname AS name FROM pg_namespace WHERE starts_with(nspname, $1)`, [
    schemaPrefix,
  ]);
  for (const { name } of rows) {
    logger.warn({ schema: name }, 'dropping the schema of an earlier rebuild that did not finish');
    await client.query(`DROP SCHEMA ${quote(name)} CASCADE`);
  }
}

async function swappedTables(client: pg.Client, schema: string): Promise<string[]> {
  const { rows } = await client.query<{ name: string }>('SELECT tablename AS name FROM pg_tables WHERE schemaname = $1', [schema]);
  const names = rows.map((row) => row.name).filter((name) => !keptLive.has(name));
  const rank = (name: string) => (lockOrder.includes(name) ? lockOrder.indexOf(name) : lockOrder.length);
  return names.sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
}

/**
 * Drops the indexes the projector does not read through (only readers do) and returns their
 * definitions to build after the bulk copy: maintaining them row by row costs a third of the
 * writes. Kept: unique ones (primary keys) and those on `workspace_id` (a workspace's deletion
 * loads its solutions by it).
 */
async function dropIndexesNotNeededToLoad(client: pg.Client, schema: string): Promise<{ name: string; definition: string }[]> {
  const { rows } = await client.query<{ name: string; definition: string }>(
    `SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS definition
     FROM pg_index i
     JOIN pg_class c ON c.oid = i.indexrelid
     JOIN pg_namespace n ON n.oid = c.relnamespace
     JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
     WHERE n.nspname = $1 AND NOT i.indisunique AND a.attname <> 'workspace_id'`,
    [schema],
  );
  for (const index of rows) await client.query(`DROP INDEX ${quote(schema)}.${quote(index.name)}`);
  return rows;
}

/**
 * How long the switch waits for each live table's lock. While it waits, readers queue behind it,
 * and it already holds the tables before; keeping every wait well under deadlock_timeout means
 * a reader never finds a lock cycle with it: the switch gives up, rolls back and tries again.
 */
async function lockTimeoutFor(client: pg.Client): Promise<number> {
  const { rows } = await client.query<{ ms: string }>(`SELECT setting AS ms FROM pg_settings WHERE name = 'deadlock_timeout'`);
  const deadlockTimeoutMs = Number(rows[0]?.ms ?? 1000);
  return Math.max(10, Math.min(100, Math.floor(deadlockTimeoutMs / (lockOrder.length + 4))));
}

// ---------------------------------------------------------------------------------------------
// The copy: a pipeline of three steps on three connections. While the writer writes batch k,
// the loader reads the rows batch k+1 needs (their state in the tables, overlaid with batch k's
// changes, which may or may not be committed yet) and the store reads batch k+2.

/** What one batch does, written by `writeBatch` and taken into CopyState by `commit`. */
type Batch = {
  from: GlobalPosition;
  to: GlobalPosition;
  events: number;
  changes: BatchChanges;
  /** Ids of the solutions this batch deletes with their own event. */
  solutionsDeleted: string[];
};

type Connections = { writer: pg.Client; solutionWriter: pg.Client; loader: pg.Client };

/** Reads and applies batches until a batch comes back short. */
async function catchUp(
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
async function writeBatchInTransaction(client: pg.Client, batch: Batch): Promise<void> {
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
function commit(state: CopyState, batch: Batch): void {
  for (const c of batch.changes.pendingCascades) state.cascades.set(c.solution_id, c.workspace_id);
  for (const solutionId of batch.solutionsDeleted) state.cascades.delete(solutionId);
  state.position = batch.to;
  state.done += batch.events;
  state.batches += 1;
}

/**
 * The rows a batch needs. Rows the rebuild wrote or read lately are kept in memory (those kept
 * first are forgotten first beyond `capacity`); the others are read from the tables, where
 * the batch being written meanwhile (`pending`, committed or not yet) is overlaid: for the rows it
 * touched, its result is the truth. A record created in the batch itself is not looked for, and
 * the solutions of a workspace deleted in it are always read from the tables (the cache cannot
 * know it holds all of them), with the kept copies preferred.
 */
class RowCache {
  private readonly workspaces = new Map<string, WorkspaceRow>();
  private readonly solutions = new Map<string, SolutionRow>();

  constructor(private readonly capacity: number) {}

  async load(loader: pg.Client, envelopes: Envelope[], pending: BatchChanges | undefined): Promise<LoadedRows> {
    const needed = rowsNeeded(envelopes);
    const created = createdInBatch(envelopes);
    const loaded: LoadedRows = { workspaces: new Map(), solutions: new Map() };
    const missing: RowsNeeded = { workspaceIds: [], solutionIds: [], workspacesDeleted: needed.workspacesDeleted };
    for (const id of needed.workspaceIds) {
      const row = this.workspaces.get(id);
      if (row) loaded.workspaces.set(id, row);
      else if (!created.has(id)) missing.workspaceIds.push(id);
    }
    for (const id of needed.solutionIds) {
      const row = this.solutions.get(id);
      if (row) loaded.solutions.set(id, row);
      else if (!created.has(id)) missing.solutionIds.push(id);
    }
    if (missing.workspaceIds.length + missing.solutionIds.length + missing.workspacesDeleted.length === 0) return loaded;
    const read = withOverlay(await loadRows(oneAtATime(loader), missing), missing, pending);
    for (const [id, row] of read.workspaces) if (!loaded.workspaces.has(id)) loaded.workspaces.set(id, row);
    for (const [id, row] of read.solutions) {
      if (!loaded.solutions.has(id)) loaded.solutions.set(id, this.solutions.get(id) ?? row);
    }
    return loaded;
  }

  /** Keeps what a batch left (the rows it changed and those it read), forgets what it deleted. */
  remember(changes: BatchChanges, loaded: LoadedRows): void {
    for (const row of loaded.workspaces.values()) this.keep(this.workspaces, row);
    for (const row of loaded.solutions.values()) this.keep(this.solutions, row);
    for (const row of changes.upsertWorkspaces) this.keep(this.workspaces, row);
    for (const row of changes.upsertSolutions) this.keep(this.solutions, row);
    for (const id of changes.deleteWorkspaces) this.workspaces.delete(id);
    for (const id of changes.deleteSolutions) this.solutions.delete(id);
    this.evict(this.workspaces, Math.floor(this.capacity / 3));
    this.evict(this.solutions, this.capacity - Math.floor(this.capacity / 3));
  }

  /** In the order rows were first kept: cheaper than moving a row on every use, and as good here. */
  private keep<Row extends { id: string }>(rows: Map<string, Row>, row: Row): void {
    rows.set(row.id, row);
  }

  private evict<Row>(rows: Map<string, Row>, max: number): void {
    if (rows.size <= max) return;
    for (const id of rows.keys()) {
      rows.delete(id);
      if (rows.size <= max) return;
    }
  }
}

/** Ids whose first event in the batch creates them: they cannot be in the tables before it. */
function createdInBatch(envelopes: Envelope[]): Set<string> {
  const seen = new Set<string>();
  const created = new Set<string>();
  for (const event of envelopes) {
    const id = event.data.id;
    if (seen.has(id)) continue;
    seen.add(id);
    if (event.type === 'WorkspaceCreated' || event.type === 'SolutionCreated') created.add(id);
  }
  return created;
}

/** The rows read from the tables as they are once `pending` (a batch being written) is applied. */
function withOverlay(loaded: LoadedRows, needed: RowsNeeded, pending: BatchChanges | undefined): LoadedRows {
  if (!pending) return loaded;
  const workspaces = new Map(loaded.workspaces);
  const wantedWorkspaces = new Set(needed.workspaceIds);
  for (const id of pending.deleteWorkspaces) workspaces.delete(id);
  for (const row of pending.upsertWorkspaces) if (wantedWorkspaces.has(row.id)) workspaces.set(row.id, row);

  const solutions = new Map(loaded.solutions);
  const wantedSolutions = new Set(needed.solutionIds);
  const wantedParents = new Set(needed.workspacesDeleted);
  for (const id of pending.deleteSolutions) solutions.delete(id);
  for (const row of pending.upsertSolutions) {
    if (wantedSolutions.has(row.id) || wantedParents.has(row.workspace_id)) solutions.set(row.id, row);
  }
  return { workspaces, solutions };
}

/** Events per call of applyBatch: it scans a batch's solutions for each workspace deletion. */
const foldChunk = 1000;

/**
 * applyBatch over a whole batch, in chunks over the rows each chunk touches, with the changes
 * combined into one set for the batch: the same result as one call, without one call's cost
 * growing with the square of the batch.
 */
async function foldBatch(
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

const lockNotAvailable = new Set(['55P03', '40P01']);

/**
 * The switch, in one transaction. Undefined when the live tables could not be locked in time
 * (nothing changed then); the caller catches up and tries again.
 */
async function trySwitch(
  client: pg.Client,
  store: EventStore,
  schema: string,
  tables: string[],
  state: CopyState,
  batchSize: number,
  lockTimeoutMs: number,
  logger: Logger,
): Promise<{ previous: GlobalPosition; pendingCascades: number } | undefined> {
  // Batches applied inside this transaction count only once it commits.
  const tentative: CopyState = { ...state, cascades: new Map(state.cascades) };
  await client.query('BEGIN');
  try {
    const live = await liveTables(client, tables);
    await client.query(`SET LOCAL lock_timeout = ${lockTimeoutMs}`);
    try {
      if (live.length > 0) {
        await client.query(`LOCK TABLE ${live.map((t) => `public.${quote(t)}`).join(', ')} IN ACCESS EXCLUSIVE MODE`);
      }
      // Blocks the live projector's checkpoint move (and so its commit), not the readers of it.
      await client.query('LOCK TABLE public.projection_checkpoints IN EXCLUSIVE MODE');
    } catch (error) {
      if (!lockNotAvailable.has((error as { code?: string }).code ?? '')) throw error;
      await client.query('ROLLBACK');
      return undefined;
    }
    // Holding everything: later statements wait only for rows of cascade_pending, never long.
    await client.query(`SET LOCAL lock_timeout = '30s'`);
    const previous = await liveCheckpoint(client);

    // The rest of the log, up to the head as it stands with the live projector held (what is
    // appended meanwhile is the live projector's once it restarts from the new checkpoint).
    for (;;) {
      const { events, end } = await readPage(store, tentative.position, batchSize);
      if (end) {
        const envelopes = events.map((logged) => logged.event);
        const loaded = await loadRows(oneAtATime(client), rowsNeeded(envelopes));
        const batch = await foldBatch(tentative.position, end, events.length, envelopes, loaded);
        await writeBatchInTransaction(client, batch);
        commit(tentative, batch);
      }
      if (events.length < batchSize) break;
    }
    if (comparePositions(tentative.position, previous) < 0) {
      throw new Error(
        `the rebuild reached ${encodePosition(tentative.position)}, behind the live checkpoint ${encodePosition(previous)}; not switching`,
      );
    }

    if (live.length > 0) await client.query(`DROP TABLE ${live.map((t) => `public.${quote(t)}`).join(', ')}`);
    for (const table of tables) await client.query(`ALTER TABLE ${quote(schema)}.${quote(table)} SET SCHEMA public`);
    await client.query(
      `INSERT INTO public.projection_checkpoints (name, commit_position, prepare_position) VALUES ($1, $2, $3)
       ON CONFLICT (name) DO UPDATE SET commit_position = excluded.commit_position, prepare_position = excluded.prepare_position`,
      [projectorName, tentative.position.commit.toString(), tentative.position.prepare.toString()],
    );
    const cascades = [...tentative.cascades].map(([solution_id, workspace_id]) => ({ solution_id, workspace_id }));
    if (cascades.length > 0) {
      await client.query(
        `INSERT INTO public.cascade_pending (solution_id, workspace_id)
         SELECT solution_id, workspace_id FROM jsonb_to_recordset($1::jsonb) AS r(solution_id text, workspace_id text)
         ON CONFLICT DO NOTHING`,
        [JSON.stringify(cascades)],
      );
    }
    // Wakes every instance's read-your-writes waiters; delivered at commit.
    await client.query('SELECT pg_notify($1, $2)', [progressChannel, encodePosition(tentative.position)]);
    await client.query('COMMIT');
    Object.assign(state, tentative);
    logger.debug({ previous: encodePosition(previous), position: encodePosition(state.position) }, 'switched over');
    return { previous, pendingCascades: cascades.length };
  } catch (error) {
    // The switch-over's own error is reported; a failed rollback ends with the connection.
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}

/** Those of the tables that exist in `public` (all of them once migrated). */
async function liveTables(client: pg.Client, tables: string[]): Promise<string[]> {
  const { rows } = await client.query<{ name: string }>(
    `SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public' AND tablename = ANY($1)`,
    [tables],
  );
  const present = new Set(rows.map((row) => row.name));
  return tables.filter((table) => present.has(table));
}

async function liveCheckpoint(client: pg.Client): Promise<GlobalPosition> {
  const { rows } = await client.query<{ commit_position: string; prepare_position: string }>(
    'SELECT commit_position, prepare_position FROM public.projection_checkpoints WHERE name = $1',
    [projectorName],
  );
  const row = rows[0];
  return row ? { commit: BigInt(row.commit_position), prepare: BigInt(row.prepare_position) } : startOfLog;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A client that runs the statements given to it one after the other. loadRows (and
 * actualReadModel) send theirs at once, which a single pg.Client only queues, with a deprecation
 * warning (an error in pg 9).
 */
export function oneAtATime(client: pg.ClientBase): Pick<pg.PoolClient, 'query'> {
  let last: Promise<unknown> = Promise.resolve();
  const query = (...args: unknown[]) => {
    const next = last.then(() => (client.query as (...a: unknown[]) => Promise<unknown>)(...args));
    // Only orders the next query after this one; the caller sees this one's failure through `next`.
    last = next.catch(() => undefined);
    return next;
  };
  return { query } as unknown as Pick<pg.PoolClient, 'query'>;
}

// ---------------------------------------------------------------------------------------------
// Wiring shared by the operator tools (projections:rebuild, projections:verify, history).
