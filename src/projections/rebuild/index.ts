import pg from 'pg';
import type { Logger } from 'pino';
import { encodePosition, startOfLog } from '../../eventstore/port.js';
import { lockKeys } from '../../infra/lock-keys.js';
import { connectionSettings } from '../../infra/postgres.js';
import { skippedPositions } from '../dead-letters.js';
import { readModelSchema } from '../schema.js';
import { bulkLoad } from './bulk.js';
import { catchUp } from './copy.js';
import { RowCache } from '../row-cache.js';
import { quote, sleep, trySwitch } from './switch-over.js';
import { RebuildAborted, type CopyState, type RebuildOptions, type RebuildProgress, type RebuildResult } from './types.js';

export { RebuildAborted, type RebuildOptions, type RebuildProgress, type RebuildResult } from './types.js';

/**
 * Rebuilds every read table from the event log while the service keeps running.
 *
 * 1. A fresh schema `read_rebuild_<time>` gets the read tables (readModelSchema with search_path
 *    set to it); the table code in tables.ts uses unqualified names, so the projector's own
 *    loadRows/applyBatch/writeChanges work there unchanged. Indexes only readers use are dropped
 *    and built once after the bulk of the copy.
 * 2. Where the store reads its log stream by stream (EventStore.readLogByStream: the PostgreSQL
 *    store), a bulk load (bulk.ts) first folds each record on its own up to a consistent point,
 *    writes the final rows with COPY and settles what crosses records in SQL; the indexes it does
 *    not need are built after it, and the batch copy below continues from that point. EventStoreDB
 *    and the in-memory store have no such read: there the batch copy does all of it.
 *    Every event (after the bulk load's) is projected into it in large batches, pipelined: while
 *    batch k is written, the rows batch k+1 needs are loaded (mostly from an in-memory cache of
 *    rows the rebuild wrote) and batch k+2 is read from the store. Each batch is written
 *    set-based by writeChanges, on two connections side by side (solutions; workspaces and
 *    counts), in statements of bounded size that commit one by one, and the rebuild's checkpoint
 *    last. The live tables keep answering and the live projector keeps running meanwhile.
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
    // that dies half-way is thrown away, so its commits need not wait for the disk. The bulk
    // load's counts and the deferred index builds sort or group whole tables: in memory, not spilled.
    try {
      await client.query(
        `SET max_parallel_workers_per_gather = 0; SET random_page_cost = 1.1; SET jit = off; SET synchronous_commit = off;
         SET work_mem = '64MB'; SET maintenance_work_mem = '256MB'`,
      );
    } catch (error) {
      // Not yet anyone's to close: its settings' failure is what is reported.
      await client.end().catch(() => undefined);
      throw error;
    }
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
    const skipped = await skippedPositions(writer);

    await writer.query(`CREATE SCHEMA ${quote(schema)}`);
    schemaCreated = true;
    await writer.query(`SET search_path TO ${quote(schema)}`);
    await writer.query(readModelSchema);
    const tables = await swappedTables(writer, schema);
    const readLogByStream = store.readLogByStream?.bind(store);
    const deferredIndexes = await dropIndexesNotNeededToLoad(
      writer,
      schema,
      readLogByStream ? { bulk: true } : { bulk: false, keptColumns: ['workspace_id'] },
    );
    logger.info({ schema, tables, deferredIndexes: deferredIndexes.map((index) => index.name) }, 'rebuild schema created');
    // Two more connections for the bulk load, which writes five tables side by side.
    for (let i = 0; i < (readLogByStream ? 4 : 2); i++) {
      const helper = await connect();
      helpers.push(helper);
      await helper.query(`SET search_path TO ${quote(schema)}`);
    }
    const [solutionWriter, loader, bulkWriter, changesWriter] = helpers as [pg.Client, pg.Client, pg.Client?, pg.Client?];

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
    const copy = () =>
      catchUp({
        connections: { writer, solutionWriter, loader },
        cache,
        store,
        state,
        batchSize,
        skipped,
        signal,
        progress: () => report('copying'),
      });
    const loadStarted = performance.now();
    if (readLogByStream && bulkWriter && changesWriter) {
      const loaded = await bulkLoad({
        store,
        read: readLogByStream,
        connections: { workspaces: writer, activity: bulkWriter, solutions: solutionWriter, creations: loader, changes: changesWriter },
        skipped,
        progressEvery: batchSize,
        progress: (events) => {
          state.done = events;
          report('copying');
          if (signal?.aborted) throw new RebuildAborted();
        },
      });
      Object.assign(state, { position: loaded.position ?? startOfLog, done: loaded.events, cascades: loaded.cascades });
    } else {
      await copy();
    }
    const indexesStarted = performance.now();
    // Indexes only the readers need are built once, over the bulk of the rows, then kept up; side
    // by side on the connections the copy uses next, as is ANALYZE.
    await onEachConnection(
      [writer, ...helpers],
      [
        ...(await largestTablesFirst(writer, deferredIndexes)).map((index) => index.definition),
        ...tables.map((table) => `ANALYZE ${quote(table)}`),
      ],
    );
    const catchUpStarted = performance.now();
    await copy();
    const switchStarted = performance.now();

    const maxAttempts = options.maxSwitchAttempts ?? 200;
    const lockTimeoutMs = await lockTimeoutFor(writer);
    for (let attempt = 1; ; attempt++) {
      if (signal?.aborted) throw new RebuildAborted();
      await options.beforeSwitch?.();
      report('switching');
      const switched = await trySwitch({ client: writer, store, schema, tables, state, batchSize, skipped, lockTimeoutMs, logger });
      if (switched) {
        await writer.query('RESET search_path');
        await writer.query(`DROP SCHEMA IF EXISTS ${quote(schema)} CASCADE`);
        schemaCreated = false;
        total = state.done;
        report('done');
        const elapsedMs = performance.now() - started;
        const result: RebuildResult = {
          bulk: Boolean(readLogByStream),
          phases: {
            loadMs: indexesStarted - loadStarted,
            indexesMs: catchUpStarted - indexesStarted,
            catchUpMs: switchStarted - catchUpStarted,
            switchMs: performance.now() - switchStarted,
          },
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

/** Runs the statements, each connection taking the next one when it is free. */
async function onEachConnection(connections: pg.Client[], statements: string[]): Promise<void> {
  const queue = [...statements];
  await Promise.all(
    connections.map(async (client) => {
      for (let statement = queue.shift(); statement !== undefined; statement = queue.shift()) await client.query(statement);
    }),
  );
}

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

type DeferredIndex = { name: string; table: string; definition: string };

/** The largest tables' indexes first: started last, they would be built while the other connections idle. */
async function largestTablesFirst(client: pg.Client, indexes: DeferredIndex[]): Promise<DeferredIndex[]> {
  const { rows } = await client.query<{ table_name: string; bytes: string }>(
    'SELECT table_name, pg_relation_size(quote_ident(table_name)) AS bytes FROM unnest($1::text[]) AS table_name',
    [[...new Set(indexes.map((index) => index.table))]],
  );
  const size = new Map(rows.map((row) => [row.table_name, Number(row.bytes)]));
  return indexes.toSorted((a, b) => size.get(b.table)! - size.get(a.table)!);
}

/** The tables the bulk load writes with COPY: it reads none of them back. */
const bulkLoadedTables = ['workspaces', 'solutions', 'changes'];

/**
 * Drops the indexes the load does not read through (only readers do) and returns the statements
 * that make them again after the copy: maintaining them row by row costs a third of the writes.
 * The batch-by-batch copy keeps the unique ones (its upserts find rows by them) and those on a
 * first column in `keptColumns` (it keeps `workspace_id`'s: a workspace's deletion loads its
 * solutions by it). The bulk load reads nothing back: on the tables it loads it keeps only those
 * by stream, which it fills in their own order, at their right edge; the others, primary keys
 * included, it would fill in random order (the change feed's key, by organization and log
 * position, was most of PostgreSQL's work in a bulk load). A duplicate the load wrote fails the
 * key's building, and with it the rebuild. A key is built as a plain unique index first, then
 * made the constraint: so it takes no lock that would keep its table's other indexes from being
 * built beside it.
 */
async function dropIndexesNotNeededToLoad(
  client: pg.Client,
  schema: string,
  load: { bulk: true } | { bulk: false; keptColumns: string[] },
): Promise<DeferredIndex[]> {
  const { rows } = await client.query<{
    name: string;
    table_name: string;
    is_unique: boolean;
    first_column: string;
    constraint_name: string | null;
    constraint_type: 'p' | 'u' | null;
    definition: string;
  }>(
    `SELECT c.relname AS name, t.relname AS table_name, i.indisunique AS is_unique, a.attname AS first_column,
            con.conname AS constraint_name, con.contype AS constraint_type,
            pg_get_indexdef(i.indexrelid) AS definition
     FROM pg_index i
     JOIN pg_class c ON c.oid = i.indexrelid
     JOIN pg_class t ON t.oid = i.indrelid
     JOIN pg_namespace n ON n.oid = c.relnamespace
     JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
     LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid AND con.contype IN ('p', 'u')
     WHERE n.nspname = $1`,
    [schema],
  );
  const deferred = rows.filter((index) =>
    load.bulk
      ? bulkLoadedTables.includes(index.table_name) && index.first_column !== 'stream_name'
      : !index.is_unique && !load.keptColumns.includes(index.first_column),
  );
  const remade: DeferredIndex[] = [];
  for (const index of deferred) {
    const table = `${quote(schema)}.${quote(index.table_name)}`;
    if (index.constraint_name !== null) {
      await client.query(`ALTER TABLE ${table} DROP CONSTRAINT ${quote(index.constraint_name)}`);
      const kind = index.constraint_type === 'p' ? 'PRIMARY KEY' : 'UNIQUE';
      const constraint = `ALTER TABLE ${table} ADD CONSTRAINT ${quote(index.constraint_name)} ${kind} USING INDEX ${quote(index.name)}`;
      remade.push({ name: index.name, table: index.table_name, definition: `${index.definition}; ${constraint}` });
    } else {
      await client.query(`DROP INDEX ${quote(schema)}.${quote(index.name)}`);
      remade.push({ name: index.name, table: index.table_name, definition: index.definition });
    }
  }
  return remade;
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
