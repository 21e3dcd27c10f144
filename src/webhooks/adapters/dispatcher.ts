import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { request, type Agent } from 'undici';
import type { FeedProgress } from '../../changes/adapters/feed.js';
import { comparePositions, type GlobalPosition } from '../../eventstore/port.js';
import { changeOf, type StoredChange } from '../../changes/feed.js';
import type { Pool } from '../../infra/postgres.js';
import { outcomeOf, retryDelay, type AttemptOutcome } from '../schedule.js';
import { signedHeaders } from '../signature.js';
import { deliveryBody, signingSecrets, type RetiredSecret } from '../webhook.js';
import { dueDeliveries, parkDisabled, promoteWaiting, type RecordOfWebhook } from './queue.js';
import { deliveryAgent } from './delivery-agent.js';
import { connectionTargetProblem } from './targets.js';

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

/**
 * Changes taken from the feed per webhook per enqueueing round, kept small: the statement holds a
 * transaction id while it runs, and the PostgreSQL log's readers (the projector) read nothing past
 * the oldest one running (src/eventstore/postgres.ts), so a long enqueue holds back every
 * command's read-your-writes wait. At 1,000 a statement that fell behind under load grew longer
 * each round, and creates waited 2 s on the projection (bench:changes, wait_projection).
 */
const enqueuedPerRound = 100;
/** Attempts one instance has out or not yet recorded at once; and the most leased by one statement. */
const attemptsAtOnce = 256;
const leasedPerRound = 128;
/**
 * How long a stop lets the attempts out finish. A receiver that answers late must not hold the
 * service's stop for the attempt's whole timeout (15 s by default, beyond the time a stop is given):
 * the attempts still out then are cut short, and recorded as nothing: their leases run out and
 * they are made again, as after a crash (an attempt is counted when leased; the webhook's failing
 * time is not touched).
 */
const attemptGraceOnStopMs = 2000;

/** An attempt cut short by the stop: no outcome to record. */
const cutShort = Symbol('cut short by the stop');

/** After the database refused to record outcomes: when to try again (they are kept meanwhile). */
const recordRetryMs = 1000;
/** Sweeps for waiting deliveries left without a due head by a process that died: every this many poll intervals. */
const roundsPerSweep = 20;
/**
 * The least time between the starts of two rounds that found nothing more due. Woken by every
 * projector batch and every outcome recorded, a round at a steady low rate carried one or two
 * deliveries, and its statements cost PostgreSQL more to plan than to run: spacing them lets a
 * round take what a few batches brought, for a few milliseconds more per delivery.
 */
const roundSpacingMs = 20;
/** How long the first outcome of a round waits for the round's other attempts before it is recorded. */
const outcomeGatherMs = 5;

type Leased = StoredChange & {
  webhook_id: string;
  stream_name: string;
  url: string;
  secret: string;
  previous_secret: string | null;
  previous_secret_until: Date | null;
  retired_secrets: RetiredSecret[];
  attempts: number;
  lease: string;
};

/** An attempt's outcome, waiting to be recorded with the others that finished about the same time. */
type Outcome = {
  delivery: Leased;
  /** The delivery's next status: `pending` again when a retry is left. */
  next: 'pending' | 'succeeded' | 'failed';
  outcome: AttemptOutcome;
  status: number | undefined;
  problem: string | undefined;
  retryInMs: number;
  seconds: number;
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
 * - Record order: a delivery with an earlier pending one of the same record for the same webhook
 *   waits (no `next_attempt_at`); only the head of each record's queue is due, so a record's
 *   changes go in version order while other records go on, and leasing reads due rows alone
 *   (src/infra/migrations/0015-webhook-heads.ts). A head that leaves `pending` makes the next one
 *   due ({@link WebhookDispatcher.promote}), and so does an enqueueing round for the rows it made
 *   wait: of the two statements, whichever runs second sees both writes (each takes its snapshot
 *   after the other's write, or after its own, committed), so no record is left without a due
 *   head. A sweep now and then covers a process that died between a write and its promotion.
 * - Disabled webhooks: the sweep parks their pending deliveries (no `next_attempt_at`), so that
 *   leases never read them, and promotion passes them over; enabled again, the next sweep makes
 *   each record's earliest one due (at once when the webhook was enabled through this instance:
 *   {@link WebhookDispatcher.sweepSoon}).
 * - Attempts: due deliveries are leased FOR UPDATE SKIP LOCKED, counting the attempt and holding
 *   it `timeout + 30 s` under a fresh lease id. Leasing goes on while attempts are out, up to {@link attemptsAtOnce}, so
 *   a slow receiver holds back only its own record's next changes. The outcomes that finish
 *   while a statement records the previous ones are recorded together by the next, each only
 *   under its own lease id. An instance killed mid-attempt leaves the lease to run out: the attempt
 *   is made again, with the same `webhook-id` (the change's id). That, an instance frozen
 *   mid-attempt past the attempt's timeout (it counts the answer that came meanwhile as none), an
 *   attempt still unanswered 2 s after the service was told to stop (cut short and left to its
 *   lease, as after a crash), and an outcome lost with the database connection are the only ways
 *   one is made twice.
 *
 * The enqueueing, leasing and recording statements run unnamed, planned at each call: prepared,
 * PostgreSQL moved to generic plans for them after five calls, and its CPU per create rose tenfold
 * (2.4 ms against 24 with 10 webhooks, `npm run bench:changes -- --listen webhooks`) while
 * deliveries fell behind.
 */
export class WebhookDispatcher {
  private readonly agent: Agent;
  private readonly stopped = new AbortController();
  /** Aborted `attemptGraceOnStopMs` after a stop: the attempts still out then are cut short, left to their leases. */
  private readonly attemptsCut = new AbortController();
  private running: Promise<void> | undefined;
  /** Attempts out, and outcomes not yet recorded: what counts against {@link attemptsAtOnce}. */
  private unrecorded = 0;
  private readonly attempts = new Set<Promise<void>>();
  private readonly outcomes: Outcome[] = [];
  private recording: Promise<void> | undefined;
  /** Ends the loop's idle wait: outcomes were recorded, so more may be due. */
  private wake: () => void = () => undefined;
  /** Set by {@link sweepSoon}: the loop sweeps once `pollMs` has passed since the last sweep. */
  private sweepAsked = false;

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

  /**
   * A webhook was enabled again: its parked deliveries are made due by a sweep within `pollMs`,
   * rather than the periodic one up to `pollMs × roundsPerSweep` later.
   */
  sweepSoon(): void {
    this.sweepAsked = true;
    this.wake();
  }

  /** Stops leasing, lets the attempts out finish and records them (leases left unrecorded run out). */
  async stop(): Promise<void> {
    this.stopped.abort();
    this.wake();
    const cut = setTimeout(() => this.attemptsCut.abort(), attemptGraceOnStopMs);
    try {
      await this.running;
    } finally {
      clearTimeout(cut);
    }
    await this.agent.close();
  }

  private async loop(): Promise<void> {
    const { signal } = this.stopped;
    let enqueuedAt: GlobalPosition | undefined;
    let enqueuedWhen = 0;
    let sweptWhen = -Infinity;
    let roundStarted = -Infinity;
    let busy = false;
    while (!signal.aborted) {
      const spacing = roundStarted + roundSpacingMs - performance.now();
      // Rejected only by stop(): the loop ends here then, leasing nothing more.
      if (!busy && spacing > 0) await sleep(spacing, undefined, { signal }).catch(() => undefined);
      if (signal.aborted) break;
      roundStarted = performance.now();
      const seen = this.progress.current;
      // Ended by new outcomes recorded, and by stop() (which aborts `signal` first).
      const idle = new AbortController();
      this.wake = () => idle.abort();
      busy = false;
      try {
        // Only when the feed moved, or now and then for a webhook created or enabled again meanwhile.
        if (enqueuedAt === undefined || comparePositions(seen, enqueuedAt) > 0 || performance.now() - enqueuedWhen >= this.pollMs) {
          await this.enqueue();
          enqueuedAt = seen;
          enqueuedWhen = performance.now();
        }
        busy = await this.leaseAndAttempt();
      } catch (error) {
        // The database is away or restarting: the next round tries again; nothing was lost (leases run out).
        this.logger.warn({ err: (error as Error).message }, 'webhook round failed; retrying');
      }
      // An asked sweep waits for pollMs after the last: a client saving its webhook over and over
      // asks for one each time, and a sweep reads every waiting delivery.
      const sinceSwept = performance.now() - sweptWhen;
      if ((this.sweepAsked && sinceSwept >= this.pollMs) || sinceSwept >= this.pollMs * roundsPerSweep) {
        this.sweepAsked = false;
        sweptWhen = performance.now();
        // Each step tries again at the next sweep: a disabled webhook's rows are only read by leases
        // a while longer, and a waiting delivery only waits longer.
        await parkDisabled(this.pool).catch((error: unknown) => {
          this.logger.warn({ err: (error as Error).message }, "disabled webhooks' deliveries not parked; retrying at the next sweep");
        });
        await this.promote(undefined).catch((error: unknown) => {
          this.logger.warn({ err: (error as Error).message }, 'webhook sweep failed; retrying');
        });
      }
      if (!busy && !signal.aborted && !idle.signal.aborted) {
        await this.progress.waitPast(seen, this.pollMs, idle.signal);
      }
    }
    while (this.attempts.size > 0) await Promise.all(this.attempts);
    while (this.recording) await this.recording;
  }
  /**
   * One round of enqueueing (see the class), each new delivery due unless its record has an
   * earlier one pending, here or in the same round. A webhook whose row moved after this
   * statement's snapshot was taken (another instance enqueued and committed meanwhile: the lock
   * returns the row as it is now) waits for the next round, since the snapshot would not show the
   * deliveries that instance added. The records given waiting rows are then promoted.
   */
  private async enqueue(): Promise<void> {
    const { rows } = await this.pool.query<RecordOfWebhook>(
      `WITH w AS (
         SELECT id, organization_id, types, enqueued_commit, enqueued_prepare FROM webhooks
         WHERE enabled FOR UPDATE SKIP LOCKED
       ), unmoved AS (
         SELECT w.* FROM w JOIN webhooks seen ON seen.id = w.id
           AND (seen.enqueued_commit, seen.enqueued_prepare) = (w.enqueued_commit, w.enqueued_prepare)
       ), found AS (
         SELECT w.id AS webhook_id, w.types, c.commit_position, c.prepare_position, c.organization_id, c.stream_name, c.type
         FROM unmoved w CROSS JOIN LATERAL (
           SELECT commit_position, prepare_position, organization_id, stream_name, type FROM changes
           WHERE organization_id = w.organization_id AND (commit_position, prepare_position) > (w.enqueued_commit, w.enqueued_prepare)
           ORDER BY changes.commit_position, changes.prepare_position LIMIT $1
         ) c
       ), wanted AS (
         SELECT found.*, row_number() OVER (PARTITION BY webhook_id, stream_name ORDER BY commit_position, prepare_position) AS nth
         FROM found WHERE type = ANY(types)
       ), queued AS (
         INSERT INTO webhook_deliveries (webhook_id, commit_position, prepare_position, organization_id, stream_name, type, status,
           next_attempt_at)
         SELECT webhook_id, commit_position, prepare_position, organization_id, stream_name, type, 'pending',
           CASE WHEN nth = 1 AND NOT EXISTS (
             SELECT FROM webhook_deliveries e WHERE e.webhook_id = wanted.webhook_id AND e.stream_name = wanted.stream_name
               AND e.status = 'pending'
           ) THEN now() END
         FROM wanted
         ON CONFLICT DO NOTHING
         RETURNING webhook_id, stream_name, next_attempt_at
       ), furthest AS (
         SELECT DISTINCT ON (webhook_id) webhook_id, commit_position, prepare_position FROM found
         ORDER BY webhook_id, commit_position DESC, prepare_position DESC
       ), moved AS (
         UPDATE webhooks SET enqueued_commit = f.commit_position, enqueued_prepare = f.prepare_position
         FROM furthest f WHERE webhooks.id = f.webhook_id
       )
       SELECT DISTINCT webhook_id, stream_name FROM queued WHERE next_attempt_at IS NULL`,
      [enqueuedPerRound],
    );
    if (rows.length > 0) await this.promote(rows);
  }

  /** Promotes the records' waiting deliveries (src/webhooks/adapters/queue.ts), waking the loop when any became due. */
  private async promote(records: readonly RecordOfWebhook[] | undefined): Promise<void> {
    if ((await promoteWaiting(this.pool, records)) > 0) this.wake();
  }

  /** Leases due attempts, as many as there is room for, and sets them going; whether it filled the room (more may be due). */
  private async leaseAndAttempt(): Promise<boolean> {
    const room = Math.min(leasedPerRound, attemptsAtOnce - this.unrecorded);
    if (room <= 0) return false;
    const leaseMs = this.settings.timeoutMs + 30_000;
    const { rows } = await this.pool.query<Leased>(
      `WITH due AS (${dueDeliveries}), leased AS (
         UPDATE webhook_deliveries d SET attempts = d.attempts + 1, last_attempt_at = now(), lease = $2::uuid,
           leased_until = now() + make_interval(secs => $3::float8 / 1000)
         FROM due WHERE (d.webhook_id, d.commit_position, d.prepare_position) = (due.webhook_id, due.commit_position, due.prepare_position)
         RETURNING d.*
       )
       SELECT l.webhook_id, l.stream_name, l.attempts, l.lease::text, w.url, w.secret, w.previous_secret, w.previous_secret_until,
         w.retired_secrets,
         c.commit_position::text, c.prepare_position::text, c.type, c.record_id, c.organization_id, c.workspace_id,
         c.version::text, c.occurred_at, c.actor, c.data
       FROM leased l JOIN webhooks w ON w.id = l.webhook_id
       JOIN changes c ON c.organization_id = l.organization_id AND c.commit_position = l.commit_position
         AND c.prepare_position = l.prepare_position`,
      [room, randomUUID(), leaseMs],
    );
    // One lease id per statement is enough to tell these attempts from a later lease's; each row also carries its own key.
    for (const row of rows) {
      this.unrecorded += 1;
      const attempt: Promise<void> = this.attempt(row)
        .then((outcome) => {
          if (outcome === cutShort) {
            // Not an outcome: the lease runs out and the attempt is made again, as after a crash.
            this.unrecorded -= 1;
            this.logger.info({ webhook: row.webhook_id }, 'webhook attempt cut short by the stop; made again once its lease runs out');
            return;
          }
          this.outcomes.push(outcome);
          this.recordWaiting();
        })
        .catch((error: unknown) => {
          // Nothing is lost: the lease runs out and the attempt is made again.
          this.unrecorded -= 1;
          this.logger.error({ err: (error as Error).message, webhook: row.webhook_id }, 'a webhook attempt failed to run');
        })
        .finally(() => this.attempts.delete(attempt));
      this.attempts.add(attempt);
    }
    return rows.length === room;
  }

  private async attempt(delivery: Leased): Promise<Outcome | typeof cutShort> {
    const change = changeOf(delivery);
    const body = deliveryBody(change);
    const started = performance.now();
    let status: number | undefined;
    let problem: string | undefined = connectionTargetProblem(delivery.url, this.settings.allowPrivateTargets);
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
          signal: AbortSignal.any([AbortSignal.timeout(this.settings.timeoutMs), this.attemptsCut.signal]),
        });
        status = response.statusCode;
        // The answer's body is not needed; reading it frees the connection for the next delivery.
        await response.body.dump().catch(() => undefined);
        if (status >= 300 && status < 400) problem = `redirect (${status}) not followed`;
        else if (outcomeOf(status) === 'failed') problem = `answered ${status}`;
      } catch (error) {
        if (this.attemptsCut.signal.aborted) return cutShort;
        problem = (error as Error).name === 'TimeoutError' ? `no answer within ${this.settings.timeoutMs} ms` : (error as Error).message;
      }
    }
    const outcome = problem === undefined ? outcomeOf(status) : status === 410 ? 'gone' : 'failed';
    const retryInMs =
      outcome === 'failed'
        ? retryDelay(this.settings.retrySchedule, delivery.attempts, Math.random(), this.pollMs + roundSpacingMs)
        : undefined;
    return {
      delivery,
      next: retryInMs !== undefined ? 'pending' : outcome === 'succeeded' ? 'succeeded' : 'failed',
      outcome,
      status,
      problem,
      retryInMs: retryInMs ?? 0,
      seconds: (performance.now() - started) / 1000,
    };
  }

  /** Records the outcomes waiting, one statement at a time: those that finish meanwhile go in the next. */
  private recordWaiting(): void {
    if (this.recording) return;
    let leftToRunOut = false;
    this.recording = (async () => {
      // The other attempts out, leased as a rule in the same round and answered within milliseconds, go in the same statement.
      if (this.attempts.size > 1 && !this.stopped.signal.aborted) await sleep(outcomeGatherMs);
      while (this.outcomes.length > 0) {
        const outcomes = this.outcomes.splice(0);
        try {
          await this.record(outcomes);
        } catch (error) {
          // Kept for the next try; their leases hold meanwhile. Once stopping, they are left to run out.
          this.outcomes.unshift(...outcomes);
          this.logger.warn({ err: (error as Error).message }, 'webhook outcomes not recorded; retrying');
          leftToRunOut = this.stopped.signal.aborted;
          if (leftToRunOut) return;
          await new Promise((resolve) => setTimeout(resolve, recordRetryMs));
        }
      }
    })().finally(() => {
      this.recording = undefined;
      // An outcome that came after the loop's last look, while it was ending, found it still running.
      if (!leftToRunOut && this.outcomes.length > 0) this.recordWaiting();
    });
  }

  /**
   * Writes outcomes, each under its lease: one whose lease was taken over meanwhile (this instance
   * was frozen past it) writes nothing. The deliveries' rows are locked in key order, then the
   * webhooks' rows by id, as a deletion of a webhook locks them too (WebhookStore.remove), so that
   * the two never deadlock. A webhook's row follows its last outcome here: a success clears its
   * failing time, a failure starts it, and a 410 among them disables it.
   */
  private async record(outcomes: readonly Outcome[]): Promise<void> {
    const rows = outcomes.map(({ delivery, next, outcome, status, problem, retryInMs }, ordinal) => ({
      ordinal,
      webhook_id: delivery.webhook_id,
      commit_position: delivery.commit_position,
      prepare_position: delivery.prepare_position,
      lease: delivery.lease,
      status: next,
      code: status ?? null,
      error: problem ?? null,
      retry_ms: retryInMs,
      succeeded: outcome === 'succeeded',
      gone: outcome === 'gone',
    }));
    const { rows: recorded } = await this.pool.query<{ ordinal: number }>(
      `WITH outcome AS (
         -- The LIMIT tells the planner how many rows this is: it takes a set-returning function for
         -- 100 rows, and then read every delivery ever kept (a sequential scan growing with the log of
         -- deliveries) rather than look up the few written here by key.
         SELECT * FROM jsonb_to_recordset($1::jsonb) AS o(ordinal int, webhook_id text, commit_position numeric,
           prepare_position numeric, lease uuid, status text, code int, error text, retry_ms float8, succeeded boolean, gone boolean)
         LIMIT $3
       ), locked AS MATERIALIZED (
         SELECT d.webhook_id, d.commit_position, d.prepare_position FROM webhook_deliveries d JOIN outcome o
           ON (d.webhook_id, d.commit_position, d.prepare_position, d.lease) = (o.webhook_id, o.commit_position, o.prepare_position, o.lease)
         ORDER BY d.webhook_id, d.commit_position, d.prepare_position
         FOR UPDATE OF d
       ), delivery AS (
         UPDATE webhook_deliveries d SET status = o.status, last_status_code = o.code, last_error = o.error, lease = NULL,
           leased_until = NULL, next_attempt_at = CASE WHEN o.status = 'pending' THEN now() + make_interval(secs => o.retry_ms / 1000) END
         FROM locked l JOIN outcome o USING (webhook_id, commit_position, prepare_position)
         WHERE (d.webhook_id, d.commit_position, d.prepare_position) = (l.webhook_id, l.commit_position, l.prepare_position)
           AND d.lease = o.lease
         RETURNING o.ordinal, o.webhook_id, o.succeeded, o.gone
       ), last_of_webhook AS (
         SELECT DISTINCT ON (webhook_id) webhook_id, succeeded, bool_or(gone) OVER (PARTITION BY webhook_id) AS gone
         FROM delivery ORDER BY webhook_id, ordinal DESC
       ), webhook AS MATERIALIZED (
         -- A success on a webhook that was not failing changes nothing in its row: left alone, it is
         -- neither locked (outcomes of other instances would queue on it, and a deletion holding it
         -- would hold them) nor written again once per delivery.
         SELECT w.id, l.succeeded, l.gone FROM webhooks w JOIN last_of_webhook l ON l.webhook_id = w.id
         WHERE NOT (l.succeeded AND w.failing_since IS NULL)
         ORDER BY w.id
         FOR UPDATE OF w
       ), disabled AS (
         UPDATE webhooks SET
           failing_since = CASE WHEN k.succeeded THEN NULL ELSE COALESCE(failing_since, now()) END,
           enabled = enabled AND NOT (k.gone OR (NOT k.succeeded AND COALESCE(failing_since, now()) < now() - make_interval(secs => $2::float8 / 1000))),
           disabled_reason = CASE
             WHEN NOT enabled THEN disabled_reason
             WHEN k.gone THEN 'gone'
             WHEN NOT k.succeeded AND COALESCE(failing_since, now()) < now() - make_interval(secs => $2::float8 / 1000) THEN 'failing'
           END
         FROM webhook k WHERE webhooks.id = k.id
       )
       SELECT ordinal FROM delivery`,
      [JSON.stringify(rows), this.settings.disableAfterMs, rows.length],
    );
    this.unrecorded -= outcomes.length;
    this.wake();
    const written = new Set(recorded.map((row) => row.ordinal));
    const ended = outcomes.filter(({ next }, ordinal) => next !== 'pending' && written.has(ordinal)).map(({ delivery }) => delivery);
    if (ended.length > 0) {
      await this.promote(ended).catch((error: unknown) => {
        // Safe to leave: the sweep makes those records' next deliveries due.
        this.logger.warn({ err: (error as Error).message }, "webhook deliveries not made due after their record's earlier one ended");
      });
    }
    outcomes.forEach(({ delivery, next, outcome, seconds }, ordinal) => {
      this.observer.onAttempt?.(next === 'pending' ? 'retry' : outcome, seconds);
      if (outcome === 'succeeded') this.observer.onDelivered?.(Math.max(0, (Date.now() - Date.parse(delivery.occurred_at)) / 1000));
      if (!written.has(ordinal)) {
        this.logger.warn({ webhook: delivery.webhook_id }, 'a webhook attempt outlived its lease; its outcome was not recorded');
      }
    });
  }
}
