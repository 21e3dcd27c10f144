import type { Readable } from 'node:stream';
import type pg from 'pg';
import { copyOut, copyRows } from '../infra/binary-copy.js';
import { joinSnapshot } from '../infra/postgres.js';
import type { GlobalPosition, RecordedEvent, StreamOrderedLog } from './port.js';

/**
 * The PostgreSQL store's log read stream by stream (EventStore.readLogByStream), for a bulk
 * rebuild. One REPEATABLE READ transaction: its boundary is the snapshot's xmin, the oldest
 * transaction still running, so that it holds exactly the events of transactions below it (each
 * of those has committed or aborted for good, as in readAll). The end position is the greatest
 * (transaction id, position) among them: a reader in global order continues from there and meets
 * exactly the events this read could not see, none twice.
 *
 * The events come in primary-key order (stream_name, version) through a binary `COPY … TO
 * STDOUT` (src/infra/binary-copy.ts): no sort (a sort of the whole log would spill it to disk).
 */

export async function readLogByStream<T>(client: pg.ClientBase, consume: (log: StreamOrderedLog) => Promise<T>): Promise<T> {
  const { boundary, end } = await beginLogSnapshot(client);
  await client.query('SET LOCAL enable_sort = off');
  const result = await consume({ end, pages: copyRows(copyLog(client, boundary, {}), fieldsPerEvent, recordedEvent) });
  await client.query('COMMIT');
  return result;
}

/**
 * The log as `readLogByStream` reads it, shared with other connections: each reads a part of it,
 * the streams of a range of names (`readLogPart`), in the same snapshot, so that together they
 * read it whole and once. The snapshot lives as long as the transaction `openLogSnapshot` leaves
 * open on its connection; the caller commits it once every part has been read.
 */
export type LogSnapshot = { snapshotId: string; boundary: string; end: GlobalPosition | undefined };

/** The streams whose names are after `after` and up to `through` (either open when absent), in the database's collation. */
export type StreamRange = { after?: string | undefined; through?: string | undefined };

export async function openLogSnapshot(client: pg.ClientBase): Promise<LogSnapshot> {
  const { boundary, end } = await beginLogSnapshot(client);
  const { rows } = await client.query<{ snapshot_id: string }>('SELECT pg_export_snapshot() AS snapshot_id');
  return { snapshotId: rows[0]!.snapshot_id, boundary, end };
}

/**
 * Names that cut the log's streams into `parts` ranges of about as many events each (`parts` - 1
 * names or fewer, sorted, each the last of its range), from a sample of its pages: a long stream
 * weighs as much as its events. Runs in the transaction `openLogSnapshot` opened.
 */
export async function streamSplits(client: pg.ClientBase, snapshot: LogSnapshot, parts: number): Promise<string[]> {
  if (parts <= 1) return [];
  const { rows: sizes } = await client.query<{ rows: number }>(
    `SELECT reltuples::float8 AS rows FROM pg_class WHERE oid = 'es_events'::regclass`,
  );
  // About `sampledEvents` events, whatever the log's size (reltuples is -1 before the first ANALYZE: all of it then).
  const percent = Math.min(100, (100 * sampledEvents) / Math.max(1, sizes[0]?.rows ?? 0)) || 100;
  const { rows } = await client.query<{ splits: string[] | null }>(
    `SELECT percentile_disc($1::float8[]) WITHIN GROUP (ORDER BY stream_name) AS splits
     FROM es_events TABLESAMPLE SYSTEM ($2) WHERE transaction_id < $3::xid8`,
    [Array.from({ length: parts - 1 }, (_, part) => (part + 1) / parts), percent, snapshot.boundary],
  );
  return [...new Set(rows[0]?.splits ?? [])];
}

const sampledEvents = 20_000;

/** Begins a transaction on another connection in the log's snapshot, for `readLogPart`. */
export async function joinLogSnapshot(client: pg.ClientBase, snapshot: LogSnapshot): Promise<void> {
  await joinSnapshot(client, snapshot.snapshotId);
  // The parts already read in parallel, one per core: a part read by several processes (a
  // parallel plan of the join in readLogPart) took about twice the CPU for the same rows.
  await client.query('SET LOCAL enable_sort = off; SET LOCAL max_parallel_workers_per_gather = 0');
}

/**
 * A table whose rows stand for events, one per (stream_name, version) at most (a unique key on
 * the two), read beside the log: `columns` of the row an event has, as text.
 */
export type RowsBeside = { table: string; columns: readonly string[] };

/** An event of the log with the text of the `RowsBeside` columns of its row, all null when it has none. */
export type EventWithRow = { event: RecordedEvent; row: (string | null)[] };

/**
 * Reads the streams of `range` from the log, stream by stream, each event with its row of
 * `beside` (joined by PostgreSQL as it reads, in the same snapshot), in the transaction
 * `joinLogSnapshot` began, and ends it. `consume` may query on `client` once it has read the
 * pages: it is still in the snapshot then (`rowsWithoutEvent`).
 */
export async function readLogPart<T>(
  client: pg.ClientBase,
  snapshot: LogSnapshot,
  range: StreamRange,
  beside: RowsBeside,
  consume: (pages: AsyncIterable<EventWithRow[]>) => Promise<T>,
): Promise<T> {
  const copy = copyLog(client, snapshot.boundary, range, beside);
  const extra = beside.columns.length;
  const result = await consume(copyRows(copy, fieldsPerEvent + extra, (buffer, at) => eventWithRow(buffer, at, extra)));
  await client.query('COMMIT');
  return result;
}

/**
 * The rows of `beside` in `range` that no event of the snapshot below its boundary has, given
 * that `joined` of the events read had one: none without a query beyond a count when every row
 * was met (each row has one event at most and each event one row, so the counts tell). Each row
 * as its stream, version and `beside.columns`, as text. In the transaction `readLogPart` reads in.
 */
export async function rowsWithoutEvent(
  client: pg.ClientBase,
  snapshot: LogSnapshot,
  range: StreamRange,
  beside: RowsBeside,
  joined: number,
): Promise<{ streamName: string; version: string; row: (string | null)[] }[]> {
  const inRange = [...rangeConditions(client, range, 'b.'), 'true'].join(' AND ');
  const { rows: counted } = await client.query<{ count: string }>(`SELECT count(*) AS count FROM ${beside.table} b WHERE ${inRange}`);
  if (Number(counted[0]!.count) === joined) return [];
  const { rows } = await client.query<(string | null)[]>({
    rowMode: 'array',
    text: `SELECT b.stream_name, b.version::text, ${beside.columns.map((column) => `b.${column}::text`).join(', ')} FROM ${beside.table} b
           WHERE ${inRange} AND NOT EXISTS (
             SELECT 1 FROM es_events e WHERE e.stream_name = b.stream_name AND e.version = b.version
               AND e.transaction_id < '${BigInt(snapshot.boundary)}'::xid8)
           ORDER BY b.stream_name, b.version`,
  });
  return rows.map(([streamName, version, ...row]) => ({
    streamName: streamName!,
    version: version!,
    row,
  }));
}

/** Opens the read-only transaction whose snapshot's xmin is the boundary, and finds the end below it. */
async function beginLogSnapshot(client: pg.ClientBase): Promise<{ boundary: string; end: GlobalPosition | undefined }> {
  await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY');
  // The first statement takes the transaction's snapshot; its xmin is the boundary.
  const { rows } = await client.query<{ boundary: string }>('SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS boundary');
  const boundary = rows[0]!.boundary;
  const end = await lastPositionBelow(client, boundary);
  await warmCache(client);
  return { boundary, end };
}

/** The conditions on `stream_name` (of the table `prefix` names) that keep to `range`. */
function rangeConditions(client: pg.ClientBase, range: StreamRange, prefix = ''): string[] {
  return [
    ...(range.after === undefined ? [] : [`${prefix}stream_name > ${client.escapeLiteral(range.after)}`]),
    ...(range.through === undefined ? [] : [`${prefix}stream_name <= ${client.escapeLiteral(range.through)}`]),
  ];
}

/**
 * The COPY of the log's events below `boundary` in `range`, in primary-key order (sorting is off
 * in the transaction), each with its row of `beside` when given.
 */
function copyLog(client: pg.ClientBase, boundary: string, range: StreamRange, beside?: RowsBeside): Readable {
  const conditions = [`e.transaction_id < '${BigInt(boundary)}'::xid8`, ...rangeConditions(client, range, 'e.')];
  const besideColumns = beside ? beside.columns.map((column) => `, b.${column}::text`).join('') : '';
  // The range again on the rows beside: their index scan then starts at the range, not at the first row.
  const besideConditions = ['b.stream_name = e.stream_name', 'b.version = e.version', ...rangeConditions(client, range, 'b.')];
  const join = beside ? `LEFT JOIN ${beside.table} b ON ${besideConditions.join(' AND ')}` : '';
  return copyOut(
    client,
    `SELECT e.transaction_id, e.position, e.stream_name, e.version, e.event_id::text, e.type, e.data::text, e.metadata::text${besideColumns}
     FROM es_events e ${join} WHERE ${conditions.join(' AND ')} ORDER BY e.stream_name, e.version`,
  );
}

async function lastPositionBelow(client: pg.ClientBase, boundary: string): Promise<GlobalPosition | undefined> {
  const { rows } = await client.query<{ commit_position: string; position: string }>(
    `SELECT transaction_id::text AS commit_position, position FROM es_events WHERE transaction_id < $1::xid8
     ORDER BY transaction_id DESC, position DESC LIMIT 1`,
    [boundary],
  );
  const row = rows[0];
  return row ? { commit: BigInt(row.commit_position), prepare: BigInt(row.position) } : undefined;
}

/**
 * The log's heap lies in append order and is read below in key order: on a cold cache, a random
 * read for nearly every event (a rebuild went from about 120,000 to 13,000–35,000 events/s on one
 * machine). One sequential pass first brings the heap into the operating system's cache, through
 * which PostgreSQL reads; it costs about a fifth of a second per million events when the heap is
 * cached already. Skipped when the heap is larger than the cache the server declares it has
 * (effective_cache_size), where the pass would only push itself out again.
 */
async function warmCache(client: pg.ClientBase): Promise<void> {
  const { rows } = await client.query<{ fits: boolean }>(
    `SELECT pg_relation_size('es_events') <= pg_size_bytes(current_setting('effective_cache_size')) AS fits`,
  );
  // `type` is in no index: the sum reads every heap page, in physical order.
  if (rows[0]!.fits) await client.query('SELECT sum(octet_length(type)) FROM es_events');
}

/** The fields of an event in copyLog's SELECT, before any of `beside`. */
const fieldsPerEvent = 8;

/** An event and, after its fields, `count` fields as text (null for a length of -1: no row beside it). */
function eventWithRow(buffer: Buffer, at: number, count: number): EventWithRow {
  const event = recordedEvent(buffer, at);
  let start = at;
  for (let field = 0; field < fieldsPerEvent; field++) start += 4 + buffer.readInt32BE(start);
  const row: (string | null)[] = [];
  for (let field = 0; field < count; field++) {
    const length = buffer.readInt32BE(start);
    row.push(length < 0 ? null : buffer.toString('utf8', start + 4, start + 4 + length));
    start += 4 + Math.max(0, length);
  }
  return { event, row };
}

/**
 * One row's event fields, in the SELECT's order, each a 32-bit length and its bytes; none is null
 * (the columns are NOT NULL). Straight-line code: this runs once per event of the log.
 */
function recordedEvent(buffer: Buffer, at: number): RecordedEvent {
  const commit = unsigned64(buffer, at + 4);
  const prepare = unsigned64(buffer, at + 16);
  let start = at + 28;
  let end = start + buffer.readInt32BE(start - 4);
  const streamName = buffer.toString('utf8', start, end);
  const version = unsigned64(buffer, end + 4);
  start = end + 16;
  end = start + buffer.readInt32BE(start - 4);
  const id = buffer.toString('latin1', start, end);
  start = end + 4;
  end = start + buffer.readInt32BE(start - 4);
  const type = buffer.toString('utf8', start, end);
  start = end + 4;
  end = start + buffer.readInt32BE(start - 4);
  const data: unknown = JSON.parse(buffer.toString('utf8', start, end));
  start = end + 4;
  end = start + buffer.readInt32BE(start - 4);
  const metadata: unknown = JSON.parse(buffer.toString('utf8', start, end));
  return { id, streamName, version, type, data, metadata, position: { commit, prepare } };
}

/**
 * A 64-bit unsigned integer (transaction ids, positions and versions are never negative): through
 * a Number while it fits in one exactly, which costs a fraction of BigInt arithmetic.
 */
function unsigned64(buffer: Buffer, at: number): bigint {
  const high = buffer.readUInt32BE(at);
  return high < 0x200000 ? BigInt(high * 0x100000000 + buffer.readUInt32BE(at + 4)) : buffer.readBigUInt64BE(at);
}
