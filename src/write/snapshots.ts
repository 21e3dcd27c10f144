import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import type { StreamHead } from '../eventstore/port.js';
import { named, type Pool } from '../infra/postgres.js';
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
const snapshotFormat = 1;

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

/** Of the latest snapshots, how many are tried before giving up on them (each one found unusable leads to the one before). */
const candidates = 4;

/** The columns as SnapshotRow has them: `version` as text, so ORDER BY names the table's (`s.version`), not this alias. */
export const snapshotColumns = 'stream_name, version::text AS version, event_id, occurred_at, format, state, checksum';

/** Where a stream's snapshots are looked for: at or before an instant or a version, and below one found unusable. */
export type SnapshotBound = { until?: Timestamp | undefined; through?: bigint | undefined; below?: bigint };

/**
 * The statement reading a stream's latest snapshot within `bound`: a few index probes, however
 * many snapshots the stream has. A stream has one every `snapshotInterval` versions, and ordered
 * by version under a bound on time PostgreSQL read and sorted every one before the instant (998 of
 * them near the end of a record of 100,000 events: its estimate for one stream is a few rows),
 * while a max() is read from an index's end whatever the estimate. A record's events occur one
 * after another (src/domain/command.ts), so its snapshots' times run in the order of their
 * versions: the one at the latest time at or before an instant is the latest version there.
 */
export function latestSnapshotQuery(streamName: string, bound: SnapshotBound): { text: string; values: unknown[] } {
  const values: unknown[] = [streamName];
  const versionBounds: string[] = [];
  if (bound.through !== undefined) versionBounds.push(`version <= $${values.push(bound.through.toString())}::bigint`);
  if (bound.below !== undefined) versionBounds.push(`version < $${values.push(bound.below.toString())}::bigint`);
  if (bound.until !== undefined) {
    const latestTime = `SELECT max(occurred_at) FROM record_snapshots WHERE stream_name = $1 AND occurred_at <= $${values.push(bound.until)}::text`;
    versionBounds.push(`version <= (SELECT max(version) FROM record_snapshots WHERE stream_name = $1 AND occurred_at = (${latestTime}))`);
  }
  return {
    text: `SELECT ${snapshotColumns} FROM record_snapshots s
           WHERE s.stream_name = $1 AND s.version = (SELECT max(version) FROM record_snapshots WHERE ${['stream_name = $1', ...versionBounds].join(' AND ')})`,
    values,
  };
}

/** Snapshots in the read database (table record_snapshots, migration 0009), in either event-store mode. */
export class PostgresSnapshots implements SnapshotStore {
  constructor(
    private readonly pool: Pool,
    private readonly logger: Logger,
  ) {}

  async latest(streamName: string, until?: Timestamp, through?: bigint): Promise<RecordSnapshot | undefined> {
    // Each one found corrupt or of another format leads to the one before it, up to `candidates`.
    for (let tried = 0, bound: SnapshotBound = { until, through }; tried < candidates; tried++) {
      let rows: SnapshotRow[];
      try {
        const { text, values } = latestSnapshotQuery(streamName, bound);
        ({ rows } = await this.pool.query<SnapshotRow>(named(text, values)));
      } catch (error) {
        // Without a snapshot the record is read from its first event: slower, and as correct.
        this.logger.warn({ err: (error as Error).message, stream: streamName }, 'could not read snapshots; reading the whole stream');
        return undefined;
      }
      const row = rows[0];
      if (!row) return undefined;
      const snapshot = readSnapshotRow(row);
      // One after the instant is met only through a corrupt row whose time was changed, which led the probe by time.
      if (typeof snapshot === 'object' && (until === undefined || snapshot.occurredAt <= until)) return snapshot;
      bound = { ...bound, below: BigInt(row.version) };
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
