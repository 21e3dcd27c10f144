import { named, type Pool } from '../../infra/postgres.js';

/**
 * The deliveries' queue (src/infra/migrations/0015-webhook-heads.ts): each record's deliveries to
 * a webhook queue behind its earliest pending one, the only one of them that can be due.
 */

/** A record's queue of deliveries to one webhook. */
export type RecordOfWebhook = { webhook_id: string; stream_name: string };

/**
 * The deliveries due now, oldest first, at most `$1` (of enabled webhooks, not leased), locked.
 * Waiting rows have no `next_attempt_at`: the due index holds heads alone, so this reads what it
 * returns (and the attempts out, still pending under their leases), whatever waits behind them.
 * The rows taken are probed for an earlier pending one all the same (an instance of an earlier
 * version, still running during an upgrade, makes every row due) and passed over if so; after
 * the limit, never before it: probing every due row before sorting made a lease cost the whole
 * backlog again (PostgreSQL 38-52 ms of CPU per create in bench:changes).
 */
export const dueDeliveries = `SELECT due.webhook_id, due.commit_position, due.prepare_position FROM (
    SELECT d.webhook_id, d.commit_position, d.prepare_position, d.stream_name FROM webhook_deliveries d
    JOIN webhooks w ON w.id = d.webhook_id AND w.enabled
    WHERE d.status = 'pending' AND d.next_attempt_at <= now() AND (d.leased_until IS NULL OR d.leased_until < now())
    ORDER BY d.next_attempt_at LIMIT $1
    FOR UPDATE OF d SKIP LOCKED
  ) due
  WHERE NOT EXISTS (
    SELECT FROM webhook_deliveries earlier
    WHERE earlier.webhook_id = due.webhook_id AND earlier.stream_name = due.stream_name AND earlier.status = 'pending'
      AND (earlier.commit_position, earlier.prepare_position) < (due.commit_position, due.prepare_position))`;

// Of enabled webhooks only: a disabled webhook's deliveries stay parked (parkDisabled).
const givenRecords = `SELECT DISTINCT r.webhook_id, r.stream_name FROM unnest($1::text[], $2::text[]) AS r(webhook_id, stream_name)
  JOIN webhooks w ON w.id = r.webhook_id AND w.enabled`;
// Webhook by webhook (a lateral probe of the index of waiting rows): a disabled webhook's parked rows are not read.
const recordsWaiting = `SELECT DISTINCT w.id AS webhook_id, d.stream_name FROM webhooks w CROSS JOIN LATERAL (
    SELECT stream_name FROM webhook_deliveries d WHERE d.webhook_id = w.id AND d.status = 'pending' AND d.next_attempt_at IS NULL
  ) d
  WHERE w.enabled`;

/**
 * Makes due the earliest pending delivery of each record given where it waits;
 * with no records given, of every record with a waiting delivery (the sweep, on the
 * index of waiting rows). Run after every write that can leave a record's earliest pending
 * delivery waiting: an outcome that ends a head, an enqueueing round or a redelivery that made a
 * delivery wait behind one that may have ended meanwhile. The rows are locked in key order, as
 * outcomes and deletions lock deliveries (WebhookStore.remove), so that none of them deadlock.
 * The number made due.
 */
export async function promoteWaiting(pool: Pool, records: readonly RecordOfWebhook[] | undefined): Promise<number> {
  const { rowCount } = await pool.query(
    named(
      `WITH record AS (${records ? givenRecords : recordsWaiting}), earliest AS (
         SELECT e.webhook_id, e.commit_position, e.prepare_position FROM record r CROSS JOIN LATERAL (
           SELECT webhook_id, commit_position, prepare_position, next_attempt_at FROM webhook_deliveries e
           WHERE e.webhook_id = r.webhook_id AND e.stream_name = r.stream_name AND e.status = 'pending'
           ORDER BY e.commit_position, e.prepare_position LIMIT 1
         ) e
         WHERE e.next_attempt_at IS NULL
       ), locked AS MATERIALIZED (
         SELECT d.webhook_id, d.commit_position, d.prepare_position FROM webhook_deliveries d JOIN earliest f
           USING (webhook_id, commit_position, prepare_position)
         ORDER BY d.webhook_id, d.commit_position, d.prepare_position
         FOR UPDATE OF d
       )
       UPDATE webhook_deliveries d SET next_attempt_at = now() FROM locked l
       WHERE (d.webhook_id, d.commit_position, d.prepare_position) = (l.webhook_id, l.commit_position, l.prepare_position)
         AND d.status = 'pending' AND d.next_attempt_at IS NULL`,
      records ? [records.map((record) => record.webhook_id), records.map((record) => record.stream_name)] : [],
    ),
  );
  return rowCount ?? 0;
}

/**
 * Parks the pending deliveries of disabled webhooks (src/infra/migrations/0016-disabled-webhooks-parked.ts):
 * they lose their `next_attempt_at`, so that leases, which read the due index oldest first, never
 * read them again. Enabled again, the webhook's records get their earliest pending delivery made
 * due by promoteWaiting, at the sweep the dispatcher of the instance that enabled it makes within
 * pollMs (WebhookDispatcher.sweepSoon), or else at its next periodic one. The disabled webhooks'
 * rows are locked (shared) first, which checks that they are still disabled and holds off an
 * update enabling one until this commits; the deliveries are locked in key order, as outcomes and
 * deletions lock them. Nothing
 * here waits for a lock: a webhook or a delivery locked by another statement, or leased (an
 * attempt out), is left to the next sweep.
 */
export async function parkDisabled(pool: Pool): Promise<void> {
  await pool.query(
    named(
      `WITH disabled AS MATERIALIZED (
         SELECT id FROM webhooks WHERE NOT enabled ORDER BY id FOR SHARE SKIP LOCKED
       ), locked AS MATERIALIZED (
         SELECT d.webhook_id, d.commit_position, d.prepare_position FROM disabled w
         JOIN webhook_deliveries d ON d.webhook_id = w.id AND d.status = 'pending' AND d.next_attempt_at IS NOT NULL
         WHERE d.leased_until IS NULL OR d.leased_until < now()
         ORDER BY d.webhook_id, d.commit_position, d.prepare_position
         FOR UPDATE OF d SKIP LOCKED
       )
       UPDATE webhook_deliveries d SET next_attempt_at = NULL FROM locked l
       WHERE (d.webhook_id, d.commit_position, d.prepare_position) = (l.webhook_id, l.commit_position, l.prepare_position)`,
      [],
    ),
  );
}

/** The age in seconds of the oldest delivery still pending (0 when none): a metric read at scrape time. */
export async function oldestPendingSeconds(pool: Pool): Promise<number> {
  const { rows } = await pool.query<{ seconds: number | null }>(
    `SELECT extract(epoch FROM now() - min(created_at))::float8 AS seconds FROM webhook_deliveries WHERE status = 'pending'`,
  );
  return rows[0]?.seconds ?? 0;
}

/** Whether any webhook is enabled (the delivery thread waits for one before it starts). */
export async function anyWebhookEnabled(pool: Pool): Promise<boolean> {
  const { rows } = await pool.query<{ any: boolean }>('SELECT EXISTS (SELECT FROM webhooks WHERE enabled) AS any');
  return rows[0]!.any;
}
