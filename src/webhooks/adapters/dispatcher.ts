import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { request, type Agent } from 'undici';
import type { FeedProgress } from '../../changes/adapters/feed.js';
import { changeOf, type StoredChange } from '../../changes/feed.js';
import type { Pool } from '../../infra/postgres.js';
import { outcomeOf, retryDelay, type AttemptOutcome } from '../schedule.js';
import { signedHeaders } from '../signature.js';
import { deliveryBody, signingSecrets } from '../webhook.js';
import { deliveryAgent, literalTargetProblem } from './targets.js';

export type DispatcherSettings = {
  timeoutMs: number;
  retrySchedule: readonly number[];
  disableAfterMs: number;
  allowPrivateTargets: boolean;
};

/** What the dispatcher tells metrics: each attempt's outcome, and a success's delay from the change. */
export type DispatcherObserver = {
  onAttempt?: (outcome: AttemptOutcome | 'retry', seconds: number) => void;
  onDelivered?: (secondsSinceChange: number) => void;
};

/** Changes taken from the feed per webhook per round, and attempts leased per round. */
const enqueuedPerRound = 1000;
const leasedPerRound = 32;

type Leased = StoredChange & {
  webhook_id: string;
  url: string;
  secret: string;
  previous_secret: string | null;
  previous_secret_until: Date | null;
  attempts: number;
  lease: string;
};

/**
 * Delivers webhooks (contract §15), in every instance at once, sharing the work through
 * PostgreSQL rather than a leader:
 *
 * - Enqueueing: each round takes, per enabled webhook locked FOR UPDATE SKIP LOCKED (one instance
 *   at a time per webhook), the changes of its organization after its `enqueued` position from the
 *   change feed's table, in log order, inserts a pending delivery for those of its types, and moves
 *   the position, all in one statement. The feed's rows become visible in log order (one projector,
 *   one transaction per batch), so no change is passed over.
 * - Attempts: a round leases due deliveries FOR UPDATE SKIP LOCKED, counting the attempt and
 *   holding it `timeout + 30 s` under a fresh lease id; only a delivery with no earlier pending one
 *   of the same record for the same webhook is due, so a record's changes go in version order
 *   while other records go on. The outcome is written only under the same lease id. An instance
 *   killed mid-attempt leaves the lease to run out: the attempt is made again, with the same
 *   `webhook-id` (the change's id), and that is the only way one is made twice.
 */
export class WebhookDispatcher {
  private readonly agent: Agent;
  private readonly stopped = new AbortController();
  private running: Promise<void> | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly progress: FeedProgress,
    private readonly settings: DispatcherSettings,
    private readonly logger: Logger,
    private readonly observer: DispatcherObserver = {},
    private readonly pollMs = 500,
  ) {
    this.agent = deliveryAgent(settings.allowPrivateTargets);
  }

  start(): void {
    this.running ??= this.loop();
  }

  async stop(): Promise<void> {
    this.stopped.abort();
    await this.running;
    await this.agent.close();
  }

  /** The age in seconds of the oldest delivery still pending (0 when none): a metric read at scrape time. */
  async oldestPendingSeconds(): Promise<number> {
    const { rows } = await this.pool.query<{ seconds: number | null }>(
      `SELECT extract(epoch FROM now() - min(created_at))::float8 AS seconds FROM webhook_deliveries WHERE status = 'pending'`,
    );
    return rows[0]?.seconds ?? 0;
  }

  private async loop(): Promise<void> {
    const { signal } = this.stopped;
    while (!signal.aborted) {
      const seen = this.progress.current;
      let busy = false;
      try {
        await this.enqueue();
        busy = (await this.attemptDue()) > 0;
      } catch (error) {
        // The database is away or restarting: the next round tries again; nothing was lost (leases run out).
        this.logger.warn({ err: (error as Error).message }, 'webhook round failed; retrying');
      }
      if (!busy && !signal.aborted) {
        await this.progress.waitPast(seen, this.pollMs, signal);
      }
    }
  }

  private async enqueue(): Promise<void> {
    await this.pool.query(
      `WITH w AS (
         SELECT id, organization_id, types, enqueued_commit, enqueued_prepare FROM webhooks
         WHERE enabled FOR UPDATE SKIP LOCKED
       ), found AS (
         SELECT w.id AS webhook_id, w.types, c.commit_position, c.prepare_position, c.organization_id, c.stream_name, c.type
         FROM w CROSS JOIN LATERAL (
           SELECT commit_position, prepare_position, organization_id, stream_name, type FROM changes
           WHERE organization_id = w.organization_id AND (commit_position, prepare_position) > (w.enqueued_commit, w.enqueued_prepare)
           ORDER BY changes.commit_position, changes.prepare_position LIMIT $1
         ) c
       ), queued AS (
         INSERT INTO webhook_deliveries (webhook_id, commit_position, prepare_position, organization_id, stream_name, type, status,
           next_attempt_at)
         SELECT webhook_id, commit_position, prepare_position, organization_id, stream_name, type, 'pending', now()
         FROM found WHERE type = ANY(types)
         ON CONFLICT DO NOTHING
       ), furthest AS (
         SELECT DISTINCT ON (webhook_id) webhook_id, commit_position, prepare_position FROM found
         ORDER BY webhook_id, commit_position DESC, prepare_position DESC
       )
       UPDATE webhooks SET enqueued_commit = f.commit_position, enqueued_prepare = f.prepare_position
       FROM furthest f WHERE webhooks.id = f.webhook_id`,
      [enqueuedPerRound],
    );
  }

  /** Leases the due attempts and makes them side by side; the number made. */
  private async attemptDue(): Promise<number> {
    const leaseMs = this.settings.timeoutMs + 30_000;
    const { rows } = await this.pool.query<Leased>(
      `WITH due AS (
         SELECT d.webhook_id, d.commit_position, d.prepare_position FROM webhook_deliveries d
         JOIN webhooks w ON w.id = d.webhook_id AND w.enabled
         WHERE d.status = 'pending' AND d.next_attempt_at <= now() AND (d.leased_until IS NULL OR d.leased_until < now())
           AND NOT EXISTS (
             SELECT FROM webhook_deliveries e
             WHERE e.webhook_id = d.webhook_id AND e.stream_name = d.stream_name AND e.status = 'pending'
               AND (e.commit_position, e.prepare_position) < (d.commit_position, d.prepare_position))
         ORDER BY d.next_attempt_at LIMIT $1
         FOR UPDATE OF d SKIP LOCKED
       ), leased AS (
         UPDATE webhook_deliveries d SET attempts = d.attempts + 1, last_attempt_at = now(), lease = $2::uuid,
           leased_until = now() + make_interval(secs => $3::float8 / 1000)
         FROM due WHERE (d.webhook_id, d.commit_position, d.prepare_position) = (due.webhook_id, due.commit_position, due.prepare_position)
         RETURNING d.*
       )
       SELECT l.webhook_id, l.attempts, l.lease::text, w.url, w.secret, w.previous_secret, w.previous_secret_until,
         c.commit_position::text, c.prepare_position::text, c.type, c.record_id, c.organization_id, c.workspace_id,
         c.version::text, c.occurred_at, c.actor, c.data
       FROM leased l JOIN webhooks w ON w.id = l.webhook_id
       JOIN changes c ON c.organization_id = l.organization_id AND c.commit_position = l.commit_position
         AND c.prepare_position = l.prepare_position`,
      [leasedPerRound, randomUUID(), leaseMs],
    );
    // One lease id per round is enough to tell this round's attempts from a later round's; each row also carries its own key.
    await Promise.all(rows.map((row) => this.attempt(row)));
    return rows.length;
  }

  private async attempt(delivery: Leased): Promise<void> {
    const change = changeOf(delivery);
    const body = deliveryBody(change);
    const started = performance.now();
    let status: number | undefined;
    let problem: string | undefined = literalTargetProblem(delivery.url, this.settings.allowPrivateTargets);
    if (!problem) {
      try {
        const now = new Date();
        const response = await request(delivery.url, {
          method: 'POST',
          dispatcher: this.agent,
          headers: {
            'content-type': 'application/json',
            'user-agent': 'workspace-solution-api-webhooks',
            ...signedHeaders(signingSecrets(delivery, now), change.id, Math.floor(now.getTime() / 1000), body),
          },
          body,
          headersTimeout: this.settings.timeoutMs,
          bodyTimeout: this.settings.timeoutMs,
          signal: AbortSignal.timeout(this.settings.timeoutMs),
        });
        status = response.statusCode;
        // The answer's body is not needed; reading it frees the connection for the next delivery.
        await response.body.dump().catch(() => undefined);
        if (status >= 300 && status < 400) problem = `redirect (${status}) not followed`;
        else if (outcomeOf(status) === 'failed') problem = `answered ${status}`;
      } catch (error) {
        problem = (error as Error).name === 'TimeoutError' ? `no answer within ${this.settings.timeoutMs} ms` : (error as Error).message;
      }
    }
    await this.record(delivery, status, problem, (performance.now() - started) / 1000);
  }

  /**
   * Writes an attempt's outcome under its lease; a lease taken over meanwhile (this instance was
   * frozen past it) writes nothing. The delivery's row is locked before the webhook's, as a
   * deletion of the webhook does too (WebhookStore.remove).
   */
  private async record(delivery: Leased, status: number | undefined, problem: string | undefined, seconds: number): Promise<void> {
    const outcome = problem === undefined ? outcomeOf(status) : status === 410 ? 'gone' : 'failed';
    const delay = outcome === 'failed' ? retryDelay(this.settings.retrySchedule, delivery.attempts, Math.random()) : undefined;
    const next = outcome === 'failed' && delay !== undefined ? 'pending' : outcome === 'succeeded' ? 'succeeded' : 'failed';
    const key = [delivery.webhook_id, delivery.commit_position, delivery.prepare_position, delivery.lease];
    const { rowCount } = await this.pool.query(
      `WITH delivery AS (
         UPDATE webhook_deliveries SET status = $5, last_status_code = $6, last_error = $7, lease = NULL, leased_until = NULL,
           next_attempt_at = CASE WHEN $5 = 'pending' THEN now() + make_interval(secs => $8::float8 / 1000) END
         WHERE webhook_id = $1 AND commit_position = $2 AND prepare_position = $3 AND lease = $4::uuid
         RETURNING webhook_id
       )
       UPDATE webhooks SET
         failing_since = CASE WHEN $9 THEN NULL ELSE COALESCE(failing_since, now()) END,
         enabled = enabled AND NOT ($10 OR (NOT $9 AND COALESCE(failing_since, now()) < now() - make_interval(secs => $11::float8 / 1000))),
         disabled_reason = CASE
           WHEN NOT enabled THEN disabled_reason
           WHEN $10 THEN 'gone'
           WHEN NOT $9 AND COALESCE(failing_since, now()) < now() - make_interval(secs => $11::float8 / 1000) THEN 'failing'
         END
       -- A success on a webhook that was not failing changes nothing in its row: left alone, it is
       -- neither locked (attempts side by side would queue on it, and a deletion holding it would
       -- deadlock with them) nor written again once per delivery.
       WHERE id IN (SELECT webhook_id FROM delivery) AND NOT ($9 AND failing_since IS NULL)`,
      [
        ...key,
        next,
        status ?? null,
        problem ?? null,
        delay ?? 0,
        outcome === 'succeeded',
        outcome === 'gone',
        this.settings.disableAfterMs,
      ],
    );
    this.observer.onAttempt?.(next === 'pending' ? 'retry' : outcome, seconds);
    if (outcome === 'succeeded') this.observer.onDelivered?.(Math.max(0, (Date.now() - Date.parse(delivery.occurred_at)) / 1000));
    if (rowCount === 0)
      this.logger.warn({ webhook: delivery.webhook_id }, 'a webhook attempt outlived its lease; its outcome was not recorded');
  }
}
