import type { EventAddress } from '../eventstore/event-log.js';
import { encodePosition, type GlobalPosition } from '../eventstore/port.js';
import type { PoolClient } from '../infra/postgres.js';
import { projectorName } from './tables.js';

/**
 * Dead letters: events of the service's own that the projector could not apply (table
 * `projection_dead_letters`, src/infra/migrations). The policy is to stop at such an event, so
 * that the read tables stay a faithful prefix of the log (docs/production.md, "Events the projector
 * cannot apply"): at most one is unresolved at a time, and the projector waits at it until an
 * operator asks for a retry or skips it (`npm run projections:dead-letters`). Skipped events stay
 * skipped for the rebuild and verify too.
 */

type Queryable = Pick<PoolClient, 'query'>;

/** NOTIFY channel: the projector stopped at a dead letter (payload: its position). */
export const blockedChannel = 'projection_blocked';

export type DeadLetter = EventAddress & {
  deadLetterId: string;
  error: string;
  attempts: number;
  firstFailedAt: string;
  lastFailedAt: string;
  retryRequestedBy: string | null;
  resolution: 'skipped' | 'retried' | null;
  resolvedBy: string | null;
  resolvedAt: string | null;
  note: string | null;
};

type Row = {
  id: string;
  commit_position: string;
  prepare_position: string;
  stream_name: string;
  version: string;
  event_id: string;
  event_type: string;
  error: string;
  attempts: number;
  first_failed_at: string;
  last_failed_at: string;
  retry_requested_by: string | null;
  resolution: 'skipped' | 'retried' | null;
  resolved_by: string | null;
  resolved_at: string | null;
  note: string | null;
};

const columns = `id::text, commit_position::text, prepare_position::text, stream_name, version::text, event_id, event_type, error, attempts,
  first_failed_at::text, last_failed_at::text, retry_requested_by, resolution, resolved_by, resolved_at::text, note`;

const toDeadLetter = (row: Row): DeadLetter => ({
  deadLetterId: row.id,
  id: row.event_id,
  streamName: row.stream_name,
  version: BigInt(row.version),
  type: row.event_type,
  position: { commit: BigInt(row.commit_position), prepare: BigInt(row.prepare_position) },
  error: row.error,
  attempts: row.attempts,
  firstFailedAt: row.first_failed_at,
  lastFailedAt: row.last_failed_at,
  retryRequestedBy: row.retry_requested_by,
  resolution: row.resolution,
  resolvedBy: row.resolved_by,
  resolvedAt: row.resolved_at,
  note: row.note,
});

/**
 * Records that `event` could not be applied (again), and tells the other instances. An event an
 * operator skipped stays skipped; one that was applied on a retry once and fails again (after a
 * rebuild, say) is open again.
 */
export async function recordDeadLetter(db: Queryable, event: EventAddress, error: string): Promise<DeadLetter> {
  const { rows } = await db.query<Row>(
    `INSERT INTO projection_dead_letters AS d (projector, commit_position, prepare_position, stream_name, version, event_id, event_type, error)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
     ON CONFLICT (projector, commit_position, prepare_position) DO UPDATE
       SET error = excluded.error, attempts = d.attempts + 1, last_failed_at = now(),
           resolution = CASE WHEN d.resolution = 'skipped' THEN 'skipped' END,
           resolved_by = CASE WHEN d.resolution = 'skipped' THEN d.resolved_by END,
           resolved_at = CASE WHEN d.resolution = 'skipped' THEN d.resolved_at END
     RETURNING ${columns}`,
    [
      projectorName,
      event.position.commit.toString(),
      event.position.prepare.toString(),
      event.streamName,
      event.version.toString(),
      event.id,
      event.type,
      error,
    ],
  );
  const deadLetter = toDeadLetter(rows[0]!);
  if (!deadLetter.resolution) await db.query('SELECT pg_notify($1, $2)', [blockedChannel, encodePosition(event.position)]);
  return deadLetter;
}

/**
 * What the projector stopped at a dead letter is to do now: skip it (an operator skipped it), try
 * it again (an operator asked; the request is taken), or keep waiting.
 */
export async function nextStep(db: Queryable, deadLetterId: string): Promise<'skip' | 'retry' | 'wait'> {
  const { rows } = await db.query<{ resolution: string | null; retry: boolean }>(
    `WITH current AS (
       SELECT resolution, retry_requested_at IS NOT NULL AS retry FROM projection_dead_letters WHERE id = $1 FOR UPDATE),
     taken AS (UPDATE projection_dead_letters SET retry_requested_at = NULL WHERE id = $1 AND retry_requested_at IS NOT NULL)
     SELECT resolution, retry FROM current`,
    [deadLetterId],
  );
  const row = rows[0];
  if (!row || row.resolution === 'skipped') return 'skip';
  return row.retry ? 'retry' : 'wait';
}

/** The dead letter at `position` was applied on a retry: resolved, by whoever asked for the retry. */
export async function markRetried(db: Queryable, position: GlobalPosition): Promise<void> {
  await db.query(
    `UPDATE projection_dead_letters SET resolution = 'retried', resolved_at = now(), resolved_by = retry_requested_by
     WHERE projector = $1 AND commit_position = $2 AND prepare_position = $3 AND resolution IS NULL`,
    [projectorName, position.commit.toString(), position.prepare.toString()],
  );
}

/** The dead letter the projector is stopped at, if any. */
export async function blockingDeadLetter(db: Queryable): Promise<DeadLetter | undefined> {
  const { rows } = await db.query<Row>(
    `SELECT ${columns} FROM projection_dead_letters WHERE projector = $1 AND resolution IS NULL ORDER BY projection_dead_letters.commit_position, projection_dead_letters.prepare_position LIMIT 1`,
    [projectorName],
  );
  return rows[0] && toDeadLetter(rows[0]);
}

/** Positions of the events operators skipped: the rebuild and verify leave them out as the projector did. */
export async function skippedPositions(db: Queryable): Promise<(position: GlobalPosition) => boolean> {
  const { rows } = await db.query<{ position: string }>(
    `SELECT commit_position::text || ':' || prepare_position::text AS position FROM projection_dead_letters
     WHERE projector = $1 AND resolution = 'skipped'`,
    [projectorName],
  );
  const skipped = new Set(rows.map((row) => row.position));
  return (position) => skipped.has(encodePosition(position));
}

/** Dead letters by state: `blocking` (the projector is stopped at it), `skipped`, `retried`. */
export async function deadLetterCounts(db: Queryable): Promise<Record<'blocking' | 'skipped' | 'retried', number>> {
  const { rows } = await db.query<{ state: 'blocking' | 'skipped' | 'retried'; count: number }>(
    `SELECT coalesce(resolution, 'blocking') AS state, count(*)::int AS count FROM projection_dead_letters GROUP BY 1`,
  );
  const counts = { blocking: 0, skipped: 0, retried: 0 };
  for (const row of rows) counts[row.state] = row.count;
  return counts;
}

/** Every dead letter, newest first (the operator command's `list`). */
export async function listDeadLetters(db: Queryable): Promise<DeadLetter[]> {
  const { rows } = await db.query<Row>(`SELECT ${columns} FROM projection_dead_letters ORDER BY id DESC`);
  return rows.map(toDeadLetter);
}

/** An operator's decision on an unresolved dead letter; undefined when there is no such unresolved one. */
export async function resolveDeadLetter(
  db: Queryable,
  deadLetterId: string,
  decision: { action: 'retry' | 'skip'; by: string; note: string | undefined },
): Promise<DeadLetter | undefined> {
  const { rows } = await db.query<Row>(
    decision.action === 'skip'
      ? `UPDATE projection_dead_letters SET resolution = 'skipped', resolved_by = $2, resolved_at = now(), note = coalesce($3, note)
         WHERE id = $1 AND resolution IS NULL RETURNING ${columns}`
      : `UPDATE projection_dead_letters SET retry_requested_by = $2, retry_requested_at = now(), note = coalesce($3, note)
         WHERE id = $1 AND resolution IS NULL RETURNING ${columns}`,
    [deadLetterId, decision.by, decision.note ?? null],
  );
  return rows[0] && toDeadLetter(rows[0]);
}
