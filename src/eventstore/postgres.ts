import type { Pool } from '../infra/postgres.js';
import { isConnectionError, type PgListener } from '../infra/postgres.js';
import {
  EventStoreUnavailable,
  StreamVersionConflict,
  type AppendResult,
  type EventStore,
  type GlobalPosition,
  type NewEvent,
  type RecordedEvent,
} from './port.js';

const appendedChannel = 'es_appended';
/** Raised by `es_append` on a version conflict (the tables and the function: src/infra/migrations/0001-event-store.ts). */
const conflictSqlState = 'ES409';

/*
 * Global order without gaps: a sequence value is taken at insert but becomes visible at commit, so
 * readers cannot trust `position > checkpoint` alone. Every event also records its transaction id
 * (xid8); readers order by (transaction id, position) and only read transactions below the oldest
 * one still running (pg_snapshot_xmin), which have all either committed or aborted for good.
 */

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

export class PostgresEventStore implements EventStore {
  /**
   * A wake-up that arrived while nobody waited (e.g. between the projector's empty read and its
   * wait): the next wait returns at once rather than miss it.
   */
  private appendedUnseen = false;

  constructor(
    private readonly pool: Pool,
    private readonly listener: PgListener,
  ) {
    listener.on(appendedChannel, () => {
      this.appendedUnseen = true;
    });
  }

  async append(streamName: string, expectedVersion: bigint, events: NewEvent[]): Promise<AppendResult> {
    try {
      const { rows } = await this.guard(() =>
        this.pool.query<{ transaction_id: string; last_position: string }>(
          'SELECT * FROM es_append($1, $2, $3::uuid[], $4::text[], $5::jsonb[], $6::jsonb[])',
          [
            streamName,
            expectedVersion.toString(),
            events.map((event) => event.id),
            events.map((event) => event.type),
            events.map((event) => JSON.stringify(event.data)),
            events.map((event) => JSON.stringify(event.metadata)),
          ],
        ),
      );
      const row = rows[0]!;
      this.announceAppend();
      return {
        version: expectedVersion + BigInt(events.length),
        position: { commit: BigInt(row.transaction_id), prepare: BigInt(row.last_position) },
      };
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code !== conflictSqlState && code !== '23505') throw error;
      const earlier = await this.earlierIdenticalAppend(streamName, expectedVersion, events);
      if (earlier) return earlier;
      throw new StreamVersionConflict(streamName, expectedVersion);
    }
  }

  async readStream(streamName: string): Promise<RecordedEvent[]> {
    const { rows } = await this.guard(() =>
      this.pool.query<EventRow>(`SELECT ${eventColumns} FROM es_events WHERE stream_name = $1 ORDER BY version`, [streamName]),
    );
    return rows.map(toRecordedEvent);
  }

  async readAll(after: GlobalPosition, limit: number): Promise<RecordedEvent[]> {
    const { rows } = await this.guard(() =>
      this.pool.query<EventRow>(
        `SELECT ${eventColumns} FROM es_events
         WHERE (transaction_id, position) > ($1::text::xid8, $2::bigint)
           AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
         ORDER BY transaction_id, position
         LIMIT $3`,
        [after.commit.toString(), after.prepare.toString(), limit],
      ),
    );
    return rows.map(toRecordedEvent);
  }

  waitForEvents(_after: GlobalPosition, timeoutMs: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        unsubscribe();
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      const unsubscribe = this.listener.on(appendedChannel, done);
      signal.addEventListener('abort', done);
      if (signal.aborted || this.appendedUnseen) done();
      this.appendedUnseen = false;
    });
  }

  async ping(): Promise<void> {
    await this.guard(() => this.pool.query('SELECT 1'));
  }

  async close(): Promise<void> {
    // The pool and listener belong to the runtime, which closes them after everything using them.
  }

  /**
   * Wakes projectors (in any instance) after an append. Sent after the commit, coalesced, from the
   * listener's own connection: a NOTIFY inside the append transaction takes PostgreSQL's
   * notify-queue lock at every commit and serialises all appends (measured with `npm run bench`).
   */
  private announceAppend(): void {
    this.listener.notify(appendedChannel);
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
      if (isConnectionError(error)) throw new EventStoreUnavailable('the event store cannot be reached', { cause: error });
      throw error;
    }
  }
}
