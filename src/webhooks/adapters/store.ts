import { decodeCursor, encodeCursor } from '../../changes/cursor.js';
import type { ChangeType } from '../../changes/feed.js';
import { inTransaction, isoMicros, named, type Pool } from '../../infra/postgres.js';
import { offsetOf, pageIdsAcrossOrganizations, toPage, type Page, type PageRequest } from '../../read/pages.js';
import { projectorName } from '../../projections/tables.js';
import { newWebhookSecret } from '../signature.js';
import { promoteWaiting } from './queue.js';
import {
  retiredSecretsKept,
  rotationOverlapMs,
  type Delivery,
  type DeliveryStatus,
  type Webhook,
  type WebhookWithSecret,
} from '../webhook.js';

const webhookColumns = `id, organization_id, url, types, description, enabled, disabled_reason,
  ${isoMicros('created_at')} AS created_at, ${isoMicros('updated_at')} AS updated_at`;

type Row = Webhook & { secret?: string };

const present = ({ secret: _secret, ...webhook }: Row): Webhook => webhook;

export type WebhookChanges = { url?: string; types?: ChangeType[]; description?: string; enabled?: boolean };

/**
 * The webhooks' rows (src/infra/migrations/0012-webhooks.ts and after): what the eight operations
 * read and write. A deleted webhook's row is removed, so its `deleted` column stays false; the
 * queries still say `NOT deleted`, the condition of the index they page by.
 */
export class WebhookStore {
  constructor(
    private readonly pool: Pool,
    private readonly newId: () => string,
    /** Told after a webhook was created or saved enabled (the delivery thread starts with the first). */
    private readonly onEnabled: () => void = () => undefined,
  ) {}

  /**
   * A new webhook, its deliveries starting after the change feed as the projection has it now:
   * every change committed after this answer is projected after that point.
   */
  async create(fields: { organization_id: string; url: string; types: ChangeType[]; description: string }): Promise<WebhookWithSecret> {
    const secret = newWebhookSecret();
    const { rows } = await this.pool.query<Row>(
      `INSERT INTO webhooks (id, organization_id, url, types, description, enabled, secret, enqueued_commit, enqueued_prepare,
         start_commit, start_prepare, created_at, updated_at)
       SELECT $1, $2, $3, $4, $5, true, $6, COALESCE(c.commit_position, 0), COALESCE(c.prepare_position, 0),
         COALESCE(c.commit_position, 0), COALESCE(c.prepare_position, 0), now(), now()
       FROM (SELECT 1) one LEFT JOIN projection_checkpoints c ON c.name = $7
       RETURNING ${webhookColumns}`,
      [this.newId(), fields.organization_id, fields.url, fields.types, fields.description, secret, projectorName],
    );
    this.onEnabled();
    return { ...present(rows[0]!), secret };
  }

  async get(id: string, organizations: readonly string[]): Promise<Webhook | undefined> {
    const { rows } = await this.pool.query<Row>(`SELECT ${webhookColumns} FROM webhooks WHERE id = $1 AND organization_id = ANY($2)`, [
      id,
      organizations,
    ]);
    return rows[0] && present(rows[0]);
  }

  /**
   * One statement, so the total and the items come from the same snapshot; the page is found as
   * the other lists find theirs (src/read/pages.ts), on the partial index webhooks_by_organization.
   */
  async list(organizations: readonly string[], request: PageRequest): Promise<Page<Webhook>> {
    const { rows } = await this.pool.query<Row & { total: string; sort_at: unknown }>(
      named(
        `WITH page AS (${pageIdsAcrossOrganizations('webhooks', organizations, 4, 'NOT deleted')})
         SELECT c.total, w.* FROM
           (SELECT count(*)::text AS total FROM webhooks WHERE organization_id = ANY($1) AND NOT deleted) c
           LEFT JOIN LATERAL (
             SELECT ${webhookColumns}, webhooks.created_at AS sort_at FROM page JOIN webhooks USING (id)
           ) w ON true
         ORDER BY w.sort_at, w.id`,
        [organizations, offsetOf(request), request.size, ...organizations],
      ),
    );
    const page = toPage(rows, request, (row) => row.id !== null);
    return { ...page, items: page.items.map(present) };
  }

  /**
   * Enabling a disabled webhook clears why it was disabled and its failing time, so it gets its
   * days again. `enabled: true` on one already enabled changes neither: a client that always sends
   * it would otherwise keep a failing webhook from ever being disabled. (SET reads the row as it
   * was before the update.)
   */
  async update(id: string, organizations: readonly string[], changes: WebhookChanges): Promise<Webhook | undefined> {
    const { rows } = await this.pool.query<Row>(
      `UPDATE webhooks SET url = COALESCE($3, url), types = COALESCE($4, types), description = COALESCE($5, description),
         enabled = COALESCE($6, enabled),
         disabled_reason = CASE WHEN $6 AND NOT enabled THEN NULL ELSE disabled_reason END,
         failing_since = CASE WHEN $6 AND NOT enabled THEN NULL ELSE failing_since END,
         updated_at = now()
       WHERE id = $1 AND organization_id = ANY($2)
       RETURNING ${webhookColumns}`,
      [id, organizations, changes.url ?? null, changes.types ?? null, changes.description ?? null, changes.enabled ?? null],
    );
    if (rows[0]?.enabled) this.onEnabled();
    return rows[0] && present(rows[0]);
  }

  /**
   * Its deliveries first, in key order, then the webhook: the order in which attempts' outcomes
   * lock them (WebhookDispatcher.record), so that the two never deadlock. Then whatever an
   * enqueueing round, which holds the webhook until it commits, added meanwhile.
   */
  async remove(id: string, organizations: readonly string[]): Promise<boolean> {
    return inTransaction(this.pool, async (client) => {
      await client.query(
        `WITH locked AS MATERIALIZED (
           SELECT webhook_id, commit_position, prepare_position FROM webhook_deliveries
           WHERE webhook_id IN (SELECT id FROM webhooks WHERE id = $1 AND organization_id = ANY($2))
           ORDER BY commit_position, prepare_position
           FOR UPDATE
         )
         DELETE FROM webhook_deliveries d USING locked l
         WHERE (d.webhook_id, d.commit_position, d.prepare_position) = (l.webhook_id, l.commit_position, l.prepare_position)`,
        [id, organizations],
      );
      const { rowCount } = await client.query('DELETE FROM webhooks WHERE id = $1 AND organization_id = ANY($2)', [id, organizations]);
      if (rowCount !== 1) return false;
      await client.query('DELETE FROM webhook_deliveries WHERE webhook_id = $1', [id]);
      return true;
    });
  }

  /**
   * A new secret; the one it replaces keeps signing, beside it, for 24 h, and so do those replaced
   * before it whose 24 h are not over: the most recently replaced, at most `retiredSecretsKept`
   * (src/webhooks/webhook.ts). `previous_secret` is written as an earlier version wrote it, and
   * read, for an instance of that version still running during an upgrade.
   */
  async rotate(id: string, organizations: readonly string[]): Promise<WebhookWithSecret | undefined> {
    const secret = newWebhookSecret();
    const { rows } = await this.pool.query<Row>(
      `UPDATE webhooks SET
         retired_secrets = (
           SELECT COALESCE(jsonb_agg(jsonb_build_object('secret', kept.secret, 'until', kept.until) ORDER BY kept.until DESC), '[]')
           FROM (
             SELECT * FROM (
               SELECT DISTINCT ON (r.secret) r.secret, r.until FROM (
                 SELECT webhooks.secret, now() + make_interval(secs => $4::float8 / 1000) AS until
                 UNION ALL SELECT webhooks.previous_secret, webhooks.previous_secret_until
                 UNION ALL SELECT s->>'secret', (s->>'until')::timestamptz FROM jsonb_array_elements(webhooks.retired_secrets) s
               ) r
               WHERE r.secret IS NOT NULL AND r.secret <> $3 AND r.until > now()
               ORDER BY r.secret, r.until DESC
             ) distinct_secrets
             ORDER BY until DESC LIMIT $5
           ) kept
         ),
         previous_secret = secret, previous_secret_until = now() + make_interval(secs => $4::float8 / 1000),
         secret = $3, updated_at = now()
       WHERE id = $1 AND organization_id = ANY($2)
       RETURNING ${webhookColumns}`,
      [id, organizations, secret, rotationOverlapMs, retiredSecretsKept],
    );
    return rows[0] && { ...present(rows[0]), secret };
  }

  async deliveries(
    id: string,
    organizations: readonly string[],
    request: PageRequest,
    status: DeliveryStatus | undefined,
  ): Promise<Page<Delivery> | undefined> {
    if (!(await this.get(id, organizations))) return undefined;
    // One statement, so the total and the items come from the same snapshot (as in `list`).
    const { rows } = await this.pool.query<DeliveryRow & { total: string }>(
      `SELECT c.total, d.* FROM
         (SELECT count(*)::text AS total FROM webhook_deliveries WHERE webhook_id = $1 AND ($2::text IS NULL OR status = $2)) c
         LEFT JOIN LATERAL (
           -- Read with its webhook, in the same snapshot: disabled, it plans no attempt, whatever its
           -- deliveries' rows still hold until the dispatcher's sweep parks them (an attempt out, too).
           SELECT ${deliveryColumns('w.enabled')},
             webhook_deliveries.commit_position AS commit_order, webhook_deliveries.prepare_position AS prepare_order
           FROM webhook_deliveries JOIN webhooks w ON w.id = webhook_deliveries.webhook_id
           WHERE webhook_deliveries.webhook_id = $1 AND ($2::text IS NULL OR status = $2)
           -- Qualified: the bare names would sort by the selected text columns, where '1011' < '301'.
           ORDER BY webhook_deliveries.commit_position, webhook_deliveries.prepare_position OFFSET $3 LIMIT $4
         ) d ON true
       ORDER BY d.commit_order, d.prepare_order`,
      [id, status ?? null, offsetOf(request), request.size],
    );
    const items = rows.filter((row) => row.commit_position !== null).map(deliveryOf);
    return { total: Number(rows[0]?.total ?? 0), page: request.page, size: request.size, items };
  }

  /**
   * Delivers a change the webhook was due again, now, with a fresh schedule (the change need not
   * have been delivered before); after an earlier change of its record still pending, if any, as a
   * first delivery would be, and once the webhook is enabled again if it is disabled (parked, as
   * the dispatcher parks its other deliveries). Due (contract §15): a change of its organization,
   * of one of its types, after its start (src/infra/migrations/0018-webhook-start.ts), or one given
   * a delivery for it already (its types may have changed since). What was not found otherwise:
   * the webhook (unknown, or not of these organizations), or such a change.
   */
  async redeliver(id: string, organizations: readonly string[], changeId: string): Promise<Redelivery> {
    const position = decodeCursor(changeId);
    const { rows } = await this.pool.query<DeliveryRow & { stream_name: string }>(
      `WITH change AS (
         SELECT w.id AS webhook_id, c.commit_position, c.prepare_position, c.organization_id, c.stream_name, c.type,
           CASE WHEN NOT w.enabled OR EXISTS (
             SELECT FROM webhook_deliveries e WHERE e.webhook_id = w.id AND e.stream_name = c.stream_name AND e.status = 'pending'
               AND (e.commit_position, e.prepare_position) < (c.commit_position, c.prepare_position)
           ) THEN NULL ELSE now() END AS next_attempt_at
         FROM webhooks w JOIN changes c ON c.organization_id = w.organization_id AND c.commit_position = $3 AND c.prepare_position = $4
         WHERE w.id = $1 AND w.organization_id = ANY($2)
           AND (
             (c.type = ANY(w.types) AND CASE WHEN w.start_commit IS NULL THEN c.occurred_at::timestamptz >= w.created_at
               ELSE (c.commit_position, c.prepare_position) > (w.start_commit, w.start_prepare) END)
             OR EXISTS (
               SELECT FROM webhook_deliveries given WHERE given.webhook_id = w.id
                 AND (given.commit_position, given.prepare_position) = (c.commit_position, c.prepare_position)
             )
           )
       )
       INSERT INTO webhook_deliveries (webhook_id, commit_position, prepare_position, organization_id, stream_name, type, status,
         next_attempt_at)
       SELECT webhook_id, commit_position, prepare_position, organization_id, stream_name, type, 'pending', next_attempt_at FROM change
       ON CONFLICT (webhook_id, commit_position, prepare_position) DO UPDATE
       SET status = 'pending', attempts = 0, next_attempt_at = EXCLUDED.next_attempt_at, last_error = NULL, lease = NULL,
         leased_until = NULL
       -- A disabled webhook's delivery was given no next_attempt_at above.
       RETURNING ${deliveryColumns('true')}, stream_name`,
      [id, organizations, position?.commit.toString() ?? null, position?.prepare.toString() ?? null],
    );
    const row = rows[0];
    if (!row) return { missing: (await this.get(id, organizations)) ? 'change' : 'webhook' };
    // Waiting behind an earlier one that ended meanwhile, it would otherwise wait for the dispatcher's sweep.
    if (row.next_attempt_at === null) await promoteWaiting(this.pool, [{ webhook_id: id, stream_name: row.stream_name }]);
    return { delivery: deliveryOf(row) };
  }
}

/** A redelivery asked for, or what was not found. */
export type Redelivery = { delivery: Delivery } | { missing: 'webhook' | 'change' };

/** A delivery's row: the change's position in place of its id. */
export type DeliveryRow = Omit<Delivery, 'change_id'> & { commit_position: string; prepare_position: string };

/**
 * A delivery's columns. `next_attempt_at` only for a pending one whose webhook is enabled
 * (`enabled`, an SQL condition): a disabled webhook's deliveries wait without one (docs/api.md §15).
 */
const deliveryColumns = (enabled: string) => `commit_position::text, prepare_position::text, type, status, attempts,
  ${isoMicros('last_attempt_at')} AS last_attempt_at, last_status_code, last_error,
  CASE WHEN status = 'pending' AND ${enabled} THEN ${isoMicros('next_attempt_at')} END AS next_attempt_at`;

const deliveryOf = (row: DeliveryRow): Delivery => ({
  change_id: encodeCursor({ commit: BigInt(row.commit_position), prepare: BigInt(row.prepare_position) }),
  type: row.type,
  status: row.status,
  attempts: row.attempts,
  last_attempt_at: row.last_attempt_at,
  last_status_code: row.last_status_code,
  last_error: row.last_error,
  next_attempt_at: row.next_attempt_at,
});
