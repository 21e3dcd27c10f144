import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import type { StreamHead } from '../eventstore/port.js';
import type { Pool } from '../infra/postgres.js';
import type { Timestamp } from '../domain/timestamp.js';

/**
 * Snapshots of records' states, so that loading a record costs its latest snapshot and the events
 * after it, not its whole history (issue 21). Derived data: a snapshot is taken from a fold of the
 * log, checked when read (a checksum, the format, and the event it ends at must still be the
 * stream's), and one that is missing, stale, corrupt or of another format costs only reading more
 * events. `npm run projections:verify` compares them with the log.
 */

/** A snapshot every this many versions of a stream, as reads and appends pass them. */
export const snapshotInterval = 100n;

/** Changed whenever a state's shape, or what evolve makes of an event, changes: snapshots of another format are ignored. */
export const snapshotFormat = 1;

export type RecordSnapshot = {
  streamName: string;
  /** The stream's head the state reflects: the version of the last event folded into it (its hash is that event's own). */
  head: Pick<StreamHead, 'version'>;
  /** The id of the event at `head.version`: a stream that no longer has it there (a store replaced) makes the snapshot void. */
  eventId: string;
  /** When that event occurred: `as_of` starts from the latest snapshot at or before its instant. */
  occurredAt: Timestamp;
  state: unknown;
};

export interface SnapshotStore {
  /**
   * The stream's latest intact snapshot, of this format; with `until`, the latest whose event
   * occurred at or before it; with `through`, the latest at or before that version.
   */
  latest(streamName: string, until?: Timestamp, through?: bigint): Promise<RecordSnapshot | undefined>;
  /** Keeps snapshots, repairing any corrupt one at the same version. Never throws: a snapshot not kept costs time later. */
  save(snapshots: RecordSnapshot[]): Promise<void>;
}

export type SnapshotRow = {
  stream_name: string;
  version: string;
  event_id: string;
  occurred_at: string;
  format: number;
  state: string;
  checksum: string;
};

const checksumOf = (row: Omit<SnapshotRow, 'checksum'>) =>
  createHash('sha256')
    .update(JSON.stringify([row.stream_name, row.version, row.event_id, row.occurred_at, row.format, row.state]))
    .digest('base64url');

const toRow = (snapshot: RecordSnapshot): SnapshotRow => {
  const row = {
    stream_name: snapshot.streamName,
    version: snapshot.head.version.toString(),
    event_id: snapshot.eventId,
    occurred_at: snapshot.occurredAt,
    format: snapshotFormat,
    state: JSON.stringify(snapshot.state),
  };
  return { ...row, checksum: checksumOf(row) };
};

/** The snapshot a row holds, or why it is not one to use: corrupt (its checksum fails) or of another format. */
export function readSnapshotRow(row: SnapshotRow): RecordSnapshot | 'corrupt' | 'other format' {
  const { checksum, ...content } = row;
  if (checksumOf(content) !== checksum) return 'corrupt';
  if (row.format !== snapshotFormat) return 'other format';
  try {
    return {
      streamName: row.stream_name,
      head: { version: BigInt(row.version) },
      eventId: row.event_id,
      occurredAt: row.occurred_at,
      state: JSON.parse(row.state) as unknown,
    };
  } catch {
    // Only a row written with a matching checksum over text that is not JSON gets here: as corrupt as any.
    return 'corrupt';
  }
}

/** Rows of one insert: a cold load of a long stream may make many. */
const rowsPerInsert = 200;

/** Of the latest snapshots, how many are tried before giving up on them (each one found corrupt leads to the one before). */
const candidates = 4;

/** The columns as SnapshotRow has them: `version` as text, so ORDER BY names the table's (`s.version`), not this alias. */
export const snapshotColumns = 'stream_name, version::text AS version, event_id, occurred_at, format, state, checksum';

/** Snapshots in the read database (table record_snapshots, migration 0009), in either event-store mode. */
export class PostgresSnapshots implements SnapshotStore {
  constructor(
    private readonly pool: Pool,
    private readonly logger: Logger,
  ) {}

  async latest(streamName: string, until?: Timestamp, through?: bigint): Promise<RecordSnapshot | undefined> {
    let rows: SnapshotRow[];
    try {
      ({ rows } = await this.pool.query<SnapshotRow>(
        `SELECT ${snapshotColumns} FROM record_snapshots s
         WHERE stream_name = $1 AND ($2::text IS NULL OR occurred_at <= $2::text) AND ($3::bigint IS NULL OR s.version <= $3::bigint)
         ORDER BY s.version DESC LIMIT ${candidates}`,
        [streamName, until ?? null, through?.toString() ?? null],
      ));
    } catch (error) {
      // Without a snapshot the record is read from its first event: slower, and as correct.
      this.logger.warn({ err: (error as Error).message, stream: streamName }, 'could not read snapshots; reading the whole stream');
      return undefined;
    }
    for (const row of rows) {
      const snapshot = readSnapshotRow(row);
      if (typeof snapshot === 'object') return snapshot;
    }
    return undefined;
  }

  async save(snapshots: RecordSnapshot[]): Promise<void> {
    for (let start = 0; start < snapshots.length; start += rowsPerInsert) {
      const rows = snapshots.slice(start, start + rowsPerInsert).map(toRow);
      try {
        await this.pool.query(
          `INSERT INTO record_snapshots AS s (stream_name, version, event_id, occurred_at, format, state, checksum)
           SELECT * FROM jsonb_to_recordset($1::jsonb)
             AS r(stream_name text, version bigint, event_id text, occurred_at text, format int, state text, checksum text)
           ON CONFLICT (stream_name, version) DO UPDATE
             SET event_id = excluded.event_id, occurred_at = excluded.occurred_at, format = excluded.format,
                 state = excluded.state, checksum = excluded.checksum
             WHERE (s.event_id, s.occurred_at, s.format, s.state, s.checksum)
               IS DISTINCT FROM (excluded.event_id, excluded.occurred_at, excluded.format, excluded.state, excluded.checksum)`,
          [JSON.stringify(rows)],
        );
      } catch (error) {
        // A snapshot not kept is taken again by a later read or append; nothing depends on it.
        this.logger.warn({ err: (error as Error).message, snapshots: rows.length }, 'could not keep snapshots');
        return;
      }
    }
  }
}
