import { isConnectionError, isConnectRefusal, named, withClient, type PgListener, type Pool } from '../infra/postgres.js';
import {
  comparePositions,
  EventStoreNotReached,
  EventStoreUnavailable,
  latestPosition,
  StreamVersionConflict,
  type AppendResult,
  type EventStore,
  type GlobalPosition,
  type NewEvent,
  type RecordedEvent,
  type StreamOrderedLog,
  type StreamRange,
} from './port.js';
import { appendingMark } from '../infra/migrations/0014-appends-marked.js';
import { readLogByStream } from './postgres-stream-order.js';

const appendedChannel = 'es_appended';

/**
 * Appends sent together in one call, and calls on their way at once. Up to a few calls at once keep
 * the round trips overlapping; beyond that, waiting appends join the next call instead of each
 * taking a connection of the pool (which queries share).
 */
const maxAppendsPerCall = 64;
const maxAppendCallsInFlight = 4;

const uniqueViolation = '23505';
const deadlockDetected = '40P01';

type QueuedAppend = {
  streamName: string;
  expectedVersion: bigint;
  events: NewEvent[];
  resolve: (result: AppendResult) => void;
  reject: (error: unknown) => void;
};

/*
 * Global order without gaps: a sequence value is taken at insert but becomes visible at commit, so
 * readers cannot trust `position > checkpoint` alone. Every event also records its transaction id
 * (xid8); readers order by (transaction id, position) and read only below the oldest append still
 * running, whose events may yet commit under ids below those already visible.
 *
 * Only appends count: PostgreSQL's own boundary, the oldest transaction still running
 * (pg_snapshot_xmin), would make every transaction on the server hold the log back while it runs
 * (a webhook attempt recorded, the integrity tree grown, an operator's forgotten BEGIN), and with
 * them the projector and every command waiting for it. An append marks its transaction before its
 * first write (`appendingMark`, migration 14), so a transaction that the statement's snapshot shows
 * running and that pg_stat_activity, read after the snapshot, shows running without the mark can
 * never add events: it is passed over. So is one whose backend is connected to another database or
 * to none: a backend never changes database, and only one of this database can write its tables
 * (a dblink or postgres_fdw write comes from a backend of this database). A server shared by
 * several services, or by test files, made each one's readers wait for the others' appends. Any
 * other running transaction of the snapshot bounds the read: a marked one, one that ended between
 * the snapshot and the activity read (its events, if any, are not in this snapshot), a prepared
 * one of any database (it has no row in pg_stat_activity). Should the current database's oid not
 * be found, the comparison is NULL and no marked append is passed over. The activity is read
 * fresh: each read of the log is one statement, its transaction's first (PostgreSQL keeps what a
 * transaction read of pg_stat_activity until it ends). Transaction ids in pg_stat_activity are 32-bit:
 * running ones are compared by their low 32 bits, which tell them apart (they lie within 2^31 of
 * each other).
 */
const visibleLogBound = `(
  SELECT coalesce(
    (SELECT min(running) FROM pg_snapshot_xip(pg_current_snapshot()) AS running
     WHERE running::text::bigint % 4294967296 NOT IN (
       SELECT backend_xid::text::bigint FROM pg_stat_get_activity(NULL)
       WHERE backend_xid IS NOT NULL AND (application_name NOT LIKE '${appendingMark}%'
         OR coalesce(datid, 0) <> (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())))),
    pg_snapshot_xmax(pg_current_snapshot())))`;

type EventRow = {
  commit_position: string;
  position: string;
  stream_name: string;
  version: string;
  event_id: string;
  type: string;
  data: unknown;
  metadata: unknown;
};

// Aliased: an output column named transaction_id would make ORDER BY sort the text, not the xid8.
const eventColumns = 'transaction_id::text AS commit_position, position, stream_name, version, event_id, type, data, metadata';

const toRecordedEvent = (row: EventRow): RecordedEvent => ({
  id: row.event_id,
  streamName: row.stream_name,
  version: BigInt(row.version),
  type: row.type,
  data: row.data,
  metadata: row.metadata,
  position: { commit: BigInt(row.commit_position), prepare: BigInt(row.position) },
});

/** How soon a reader looks again for events appended here that an older transaction still hides. */
const hiddenEventsPollMs = 10;

export class PostgresEventStore implements EventStore {
  /**
   * A wake-up that arrived while nobody waited (while the projector read or applied a batch): the
   * next wait returns at once rather than miss it. One that woke a waiter is not kept: the waiter
   * reads next, and a later wait is for what comes after.
   */
  private appendedUnseen = false;

  /** The waits for events of this process (its projector's), woken by an append here or a notification. */
  private readonly waiting = new Set<() => void>();

  /**
   * The position of this process's latest append. Committed events a reader does not see yet are
   * hidden only while an older append on the server still runs (another instance's, or another
   * call of this one's): a wait after an empty read looks again soon, not after the reader's idle back-off.
   */
  private lastAppended: GlobalPosition | undefined;

  /**
   * Whether this process's own projector is the one reading the log (see `readLocally`): then its
   * appends wake it here, and no other process needs a notification.
   */
  private readerIsHere: () => boolean = () => false;

  constructor(
    private readonly pool: Pool,
    private readonly listener: PgListener,
  ) {
    listener.on(appendedChannel, () => this.wake());
  }

  /** Tells the store how to know that the active projector is this process's (it then skips the NOTIFY after each append). */
  readLocally(readerIsHere: () => boolean): void {
    this.readerIsHere = readerIsHere;
  }

  /**
   * Appends that arrived while others were on their way, sent together as one call when a call
   * slot frees up: under load many commands share one round trip and one commit, and each append
   * still succeeds or is refused on its own. An idle store sends an append at once.
   */
  private readonly queued: QueuedAppend[] = [];
  private callsInFlight = 0;

  append(streamName: string, expectedVersion: bigint, events: NewEvent[]): Promise<AppendResult> {
    return new Promise<AppendResult>((resolve, reject) => {
      this.queued.push({ streamName, expectedVersion, events, resolve, reject });
      this.sendQueued();
    }).catch(async (error: unknown) => {
      if (!(error instanceof StreamVersionConflict)) throw error;
      const earlier = await this.earlierIdenticalAppend(streamName, expectedVersion, events);
      if (earlier) return earlier;
      throw error;
    });
  }

  private sendQueued(): void {
    while (this.queued.length > 0 && this.callsInFlight < maxAppendCallsInFlight) {
      // In the order of their streams' names: calls in flight at once then lock the streams they
      // share in the same order, rather than deadlocking over them.
      const batch = this.queued
        .splice(0, maxAppendsPerCall)
        .sort((a, b) => (a.streamName < b.streamName ? -1 : a.streamName > b.streamName ? 1 : 0));
      this.callsInFlight += 1;
      void this.appendBatch(batch).finally(() => {
        this.callsInFlight -= 1;
        this.sendQueued();
      });
    }
  }

  private async appendBatch(batch: QueuedAppend[], rollbacksLeft = 3): Promise<void> {
    let rows: { index: number; appended: boolean; transaction_id: string | null; last_position: string | null }[];
    try {
      ({ rows } = await this.guard(() =>
        this.pool.query<(typeof rows)[number]>(
          named('SELECT * FROM es_append_batch($1::jsonb)', [
            JSON.stringify(
              batch.map(({ streamName, expectedVersion, events }) => ({
                stream: streamName,
                expected: expectedVersion.toString(),
                events: events.map(({ id, type, data, metadata }) => ({ id, type, data, metadata })),
              })),
            ),
          ]),
        ),
      ));
    } catch (error) {
      // PostgreSQL chose the call as a deadlock's victim and rolled it back: nothing was written, so
      // the same appends go again (a few times: each try waits for the locks the other one held).
      if ((error as { code?: string }).code === deadlockDetected && rollbacksLeft > 0) {
        await this.appendBatch(batch, rollbacksLeft - 1);
        return;
      }
      // One append's failure must not fail the others: each is sent again alone, unless the store is
      // out of reach (then it is for all of them). Alone, a duplicate key means a conflicting write.
      if (batch.length > 1 && !(error instanceof EventStoreUnavailable)) {
        await Promise.all(batch.map((append) => this.appendBatch([append])));
        return;
      }
      const conflict = (error as { code?: string }).code === uniqueViolation;
      for (const append of batch) append.reject(conflict ? new StreamVersionConflict(append.streamName, append.expectedVersion) : error);
      return;
    }
    this.lastAppended = latestPosition([
      this.lastAppended,
      ...rows.map((row) => (row.appended ? { commit: BigInt(row.transaction_id!), prepare: BigInt(row.last_position!) } : undefined)),
    ]);
    this.announceAppend();
    for (const row of rows) {
      const append = batch[row.index]!;
      if (!row.appended) append.reject(new StreamVersionConflict(append.streamName, append.expectedVersion));
      else {
        append.resolve({
          version: append.expectedVersion + BigInt(append.events.length),
          position: { commit: BigInt(row.transaction_id!), prepare: BigInt(row.last_position!) },
        });
      }
    }
  }

  async readStream(streamName: string, range: StreamRange = {}): Promise<RecordedEvent[]> {
    // Versions run without gaps, so the range is bounded on both sides: whatever plan PostgreSQL
    // picks (a bitmap scan and a sort, with stale statistics), it visits only the range's rows.
    // The last version comes from the primary key's end (max() reads one index entry). LIMIT
    // NULL: no limit; 2^62 stands for "no bound" without overflowing.
    const backwards = range.direction === 'backwards';
    const from = range.from?.toString() ?? null;
    const limit = range.limit ?? null;
    const { rows } = await this.guard(() =>
      this.pool.query<EventRow>(
        backwards
          ? named(
              `WITH top AS (SELECT coalesce($2::bigint, (SELECT max(version) FROM es_events WHERE stream_name = $1)) AS last_version)
               SELECT ${eventColumns} FROM es_events, top
               WHERE stream_name = $1 AND version <= top.last_version
                 AND version > top.last_version - coalesce($3::bigint, 4611686018427387904)
               ORDER BY version DESC LIMIT $3`,
              [streamName, from, limit],
            )
          : named(
              `SELECT ${eventColumns} FROM es_events
               WHERE stream_name = $1 AND version >= coalesce($2::bigint, 1)
                 AND version < coalesce($2::bigint, 1) + coalesce($3::bigint, 4611686018427387904)
               ORDER BY version LIMIT $3`,
              [streamName, from, limit],
            ),
      ),
    );
    return rows.map(toRecordedEvent);
  }

  async readAll(after: GlobalPosition, limit: number): Promise<RecordedEvent[]> {
    const { rows } = await this.guard(() =>
      this.pool.query<EventRow>(
        named(
          `SELECT ${eventColumns} FROM es_events
           WHERE (transaction_id, position) > ($1::text::xid8, $2::bigint)
             AND transaction_id < ${visibleLogBound}
           ORDER BY transaction_id, position
           LIMIT $3`,
          [after.commit.toString(), after.prepare.toString(), limit],
        ),
      ),
    );
    return rows.map(toRecordedEvent);
  }

  async readLastPosition(): Promise<GlobalPosition | undefined> {
    const { rows } = await this.guard(() =>
      this.pool.query<{ commit_position: string; position: string }>(
        named(
          `SELECT transaction_id::text AS commit_position, position FROM es_events
           WHERE transaction_id < ${visibleLogBound}
           ORDER BY transaction_id DESC, position DESC
           LIMIT 1`,
          [],
        ),
      ),
    );
    const row = rows[0];
    return row ? { commit: BigInt(row.commit_position), prepare: BigInt(row.position) } : undefined;
  }

  /** Events are numbered by an identity column as they are inserted: the difference counts them, and the numbers rolled-back appends took. */
  estimateEventsBetween(from: GlobalPosition, to: GlobalPosition): number {
    return Math.max(0, Number(to.prepare - from.prepare));
  }

  async readLogByStream<T>(consume: (log: StreamOrderedLog) => Promise<T>): Promise<T> {
    return this.guard(() =>
      // A read that did not end may still be streaming (or inside its transaction): its connection is closed, not reused.
      withClient(
        this.pool,
        (client) => readLogByStream(client, consume),
        (ended) => ended,
      ),
    );
  }

  waitForEvents(after: GlobalPosition, timeoutMs: number, signal: AbortSignal): Promise<void> {
    const hidden = this.lastAppended !== undefined && comparePositions(this.lastAppended, after) > 0;
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        unsubscribe();
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, hidden ? Math.min(timeoutMs, hiddenEventsPollMs) : timeoutMs);
      this.waiting.add(done);
      const unsubscribe = () => this.waiting.delete(done);
      signal.addEventListener('abort', done);
      if (signal.aborted || this.appendedUnseen) done();
      this.appendedUnseen = false;
    });
  }

  private wake(): void {
    if (this.waiting.size === 0) this.appendedUnseen = true;
    for (const done of this.waiting) done();
  }

  async ping(): Promise<void> {
    await this.guard(() => this.pool.query('SELECT 1'));
  }

  async close(): Promise<void> {
    // The pool and listener belong to the runtime, which closes them after everything using them.
  }

  /**
   * Wakes the projector after an append: in this process directly, and in another instance by a
   * NOTIFY, sent only while the active projector is not this process's own. The NOTIFY goes after
   * the commit, coalesced, from the listener's own connection: inside the append transaction it
   * would take PostgreSQL's notify-queue lock at every commit and serialise all appends (measured
   * with `npm run bench`). Should leadership move meanwhile, the new leader reads at its start and
   * polls: a skipped notification is only a later wake-up.
   */
  private announceAppend(): void {
    this.wake();
    if (!this.readerIsHere()) this.listener.notify(appendedChannel);
  }

  /** A retry of an append that already succeeded (same event ids at the same version) answers as it did. */
  private async earlierIdenticalAppend(streamName: string, expectedVersion: bigint, events: NewEvent[]): Promise<AppendResult | undefined> {
    const { rows } = await this.guard(() =>
      this.pool.query<EventRow>(
        `SELECT ${eventColumns} FROM es_events WHERE stream_name = $1 AND version > $2 AND version <= $3 ORDER BY version`,
        [streamName, expectedVersion.toString(), (expectedVersion + BigInt(events.length)).toString()],
      ),
    );
    const same = rows.length === events.length && rows.every((row, index) => row.event_id === events[index]!.id);
    if (!same) return undefined;
    const last = toRecordedEvent(rows[rows.length - 1]!);
    return { version: last.version, position: last.position };
  }

  private async guard<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (error) {
      if (isConnectionError(error)) {
        throw isConnectRefusal(error)
          ? new EventStoreNotReached('the event store cannot be reached', { cause: error })
          : new EventStoreUnavailable('the event store cannot be reached', { cause: error });
      }
      throw error;
    }
  }
}
