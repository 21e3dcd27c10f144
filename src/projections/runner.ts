import pg from 'pg';
import type { Logger } from 'pino';
import { changeEntriesOf } from '../changes/feed.js';
import { readPage, type EventAddress, type LoggedEvent, type Page } from '../eventstore/event-log.js';
import { comparePositions, encodePosition, startOfLog, type EventStore, type GlobalPosition } from '../eventstore/port.js';
import { lockKeys } from '../infra/lock-keys.js';
import { connectionSettings, isConnectionError } from '../infra/postgres.js';
import { sleepUnlessAborted, unlessAborted } from '../infra/sleep.js';
import { applyBatch, rowsToLoad, type BatchChanges, type LoadedRows } from './batch.js';
import { defaultPageSizes, nextPageSize, type PageSizes } from './catch-up.js';
import { markRetried, nextStep, recordDeadLetter, type DeadLetter } from './dead-letters.js';
import { bulkPaceChannel, encodeBulkPace, progressChannel, type BulkPace, type ProjectionProgress } from './progress.js';
import { rebuildReadModel } from './rebuild/index.js';
import { RowCache } from './row-cache.js';
import { loadRows, projectorName, readCheckpoint, readRowTables, writeChanges, type RowTables } from './tables.js';

/**
 * Rows beyond which a batch (the solutions of a deleted workspace, as a rule) renews the sign of
 * life between its steps: each step over a hundred thousand rows holds the event loop for a good
 * part of a second, longer on a busy machine, and the steps together longer than a standby waits.
 */
const manyRows = 10_000;

/** How long a batch in progress keeps the sign of life going at most: one stuck in this process longer is left to be replaced. */
const batchKeepAliveMs = 60_000;

export type ProjectionRunnerOptions = {
  connectionString: string;
  store: EventStore;
  progress: ProjectionProgress;
  logger: Logger;
  /** Events per batch when caught up (default 500)... */
  batchSize?: number;
  /** ...and at most, while catching up a backlog (default 2,500, defaultPageSizes): see src/projections/catch-up.ts. */
  maxBatchSize?: number;
  /** Rows kept in memory from batch to batch while catching up (default 100,000), so that each is read once. */
  cachedRows?: number;
  /**
   * A backlog of at least this many events, and at least half the log, is projected by the
   * rebuild's bulk path when the store reads its log stream by stream (see bulkCatchUp). Unset: never.
   */
  bulkCatchUpEvents?: number;
  /** How often a standby instance tries to take over. */
  standbyRetryMs?: number;
  /** The active projector renews its sign of life at least this often... */
  renewEveryMs?: number;
  /** ...and a standby replaces it after this long without one. */
  staleAfterMs?: number;
  /** Idle polling starts here and doubles up to `maxIdlePollMs` while no notification arrives. */
  minIdlePollMs?: number;
  maxIdlePollMs?: number;
  /** Called on becoming active and after a batch that left workspace deletions to cascade. */
  onCascadesPending?: () => void;
  /** Told of each batch applied: its events, and the time applying it took (metrics). */
  onBatchApplied?: (events: number, seconds: number) => void;
  /** While stopped at a dead letter, how often to look for an operator's decision (default 500 ms). */
  deadLetterPollMs?: number;
  /** Called inside the batch's transaction, before its commit; tests crash the projector here. */
  beforeCommit?: () => Promise<void>;
};

class LostLeadership extends Error {}

/**
 * What a catch-up keeps from batch to batch: the rows its batches wrote or read (this projector,
 * holding the lock, is the only writer of the read tables, so they stay true while its batches
 * commit), and a second connection that reads the rows of the next batch while this one is
 * written, as the rebuild does (src/projections/rebuild/copy.ts).
 */
type CatchUp = { cache: RowCache; loader: pg.Client };

/** A batch folded over its rows, ready to write. */
type FoldedBatch = { loaded: LoadedRows; changes: BatchChanges };

/**
 * Whether a batch failed because of what its events hold, rather than the connection, the
 * leadership or a passing condition: an error thrown while folding them, or PostgreSQL refusing
 * the rows they make (SQLSTATE classes 22, data exception, and 23, integrity constraint).
 */
function failedOnItsEvents(error: unknown): boolean {
  if (error instanceof LostLeadership || isConnectionError(error)) return false;
  const sqlState = (error as { code?: unknown }).code;
  if (typeof sqlState === 'string' && /^[0-9A-Z]{5}$/.test(sqlState)) return /^2[23]/.test(sqlState);
  return true;
}

const addressOf = (logged: LoggedEvent): EventAddress => ({
  id: logged.id,
  streamName: logged.streamName,
  version: logged.version,
  type: logged.event.type,
  position: logged.position,
});

/**
 * Reads events in global order, applies them in batches to the read tables and moves the
 * checkpoint in the same transaction: after a crash a batch is either wholly applied with its
 * checkpoint or not at all. A session advisory lock, held on the connection that writes, keeps
 * one projector active; the checkpoint moves only from where this projector read it, so even a
 * projector that lost its lock unknowingly cannot apply a batch twice.
 */
export class ProjectionRunner {
  private readonly abort = new AbortController();
  private loop: Promise<void> | undefined;
  private active = false;
  private failures = 0;
  /** When the sign of life was last renewed (`renew`), on the monotonic clock (a step of the wall clock must not skip or hasten one). */
  private lastRenewal = -Infinity;

  constructor(private readonly options: ProjectionRunnerOptions) {}

  get isActive(): boolean {
    return this.active;
  }

  start(): void {
    this.loop ??= this.run();
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.loop;
  }

  private async run(): Promise<void> {
    const { logger } = this.options;
    while (!this.abort.signal.aborted) {
      const client = new pg.Client({ connectionString: this.options.connectionString, ...connectionSettings });
      // A lost session fails the statement in flight, which ends this loop's turn and is logged there.
      client.on('error', () => undefined);
      try {
        await client.connect();
        // The projector's commits do not wait for the disk. The read tables are derived from the
        // log, whose appends do wait: should PostgreSQL itself crash, the last batches' rows and
        // their checkpoint, written in one transaction, are lost together and projected again.
        await client.query('SET synchronous_commit = off');
        // Planned for the tables as they are at each batch, not as they were when a statement was
        // first prepared: a projector that starts on empty tables (a fresh read database, after a
        // restore) would otherwise keep the sequential scans planned for them while it fills them,
        // each batch slower than the last, until autovacuum's next ANALYZE.
        await client.query('SET plan_cache_mode = force_custom_plan');
        // A standby keeps its one connection and asks for the lock again on it.
        while (!this.abort.signal.aborted) {
          const { rows } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [lockKeys.projector]);
          if (rows[0]?.locked) break;
          await this.replaceStuckLeader(client);
          await this.sleep(this.options.standbyRetryMs ?? 500);
        }
        if (this.abort.signal.aborted) break;
        await this.renew(client, true);
        this.active = true;
        logger.info('projector active');
        await this.project(client);
      } catch (error) {
        // Stopping: what was cut short is no failure.
        if (this.abort.signal.aborted) break;
        this.failures += 1;
        const delay = Math.min(100 * 2 ** this.failures, 5000);
        logger.warn({ err: (error as Error).message, retryInMs: delay }, 'projector stopped; retrying');
        await this.sleep(delay);
      } finally {
        if (this.active) logger.info('projector inactive');
        this.active = false;
        // The connection is discarded either way; its session's end releases the lock.
        await client.end().catch(() => undefined);
      }
    }
  }

  private async project(client: pg.Client): Promise<void> {
    const { store, progress, minIdlePollMs = 25, maxIdlePollMs = 1000 } = this.options;
    const sizes: PageSizes = {
      min: this.options.batchSize ?? defaultPageSizes.min,
      max: Math.max(this.options.maxBatchSize ?? defaultPageSizes.max, this.options.batchSize ?? 0),
    };
    let checkpoint = await readCheckpoint(client);
    if (await this.bulkCatchUp(client, checkpoint)) checkpoint = await readCheckpoint(client);
    progress.advance(checkpoint);
    const rowTables = await readRowTables(client);
    // Dropped once caught up (a small batch reads few rows) and after any failed batch.
    let catchUp: CatchUp | undefined;
    const endCatchUp = () => {
      // Ending the connection fails only if it is gone already; a fold still reading on it is dropped with it.
      catchUp?.loader.end().catch(() => undefined);
      catchUp = undefined;
    };
    let idlePollMs = minIdlePollMs;
    // After a short page is applied the projector is at the log's end as it read it: it waits for
    // the next append before reading again, rather than read an empty page first (a round trip to
    // the store for every batch, and most batches are short pages once caught up).
    let atEnd = false;
    let pageSize = sizes.min;
    // The next page, read while the current one is applied; dropped (and read again) if the checkpoint does not move to its start.
    // While catching up, it is also folded while the current one is written.
    let nextPage: { after: GlobalPosition; size: number; page: Promise<Page>; folded?: Promise<FoldedBatch | undefined> } | undefined;
    // Cascades are drained once caught up: behind, the log ahead may hold their SolutionDeleted
    // already (the projector then takes them off the list itself), and draining would compete
    // with the catch-up for the database.
    let cascadesPending = true;
    // Dead letters (src/projections/dead-letters.ts): the one this projector is stopped at, the one
    // an operator asked to retry, and, after a batch failed on its events, how far to read them one by one.
    let stoppedAt: DeadLetter | undefined;
    let retrying: GlobalPosition | undefined;
    let oneByOneUntil: GlobalPosition | undefined;
    try {
      while (!this.abort.signal.aborted) {
        await this.renew(client);
        if (stoppedAt) {
          const step = await nextStep(client, stoppedAt.deadLetterId);
          if (step === 'wait') {
            await this.sleep(this.options.deadLetterPollMs ?? 500);
            continue;
          }
          // A skip ends any retry of the same event: it was not applied.
          retrying = step === 'retry' ? stoppedAt.position : undefined;
          if (step === 'skip') checkpoint = await this.passOver(client, checkpoint, stoppedAt);
          stoppedAt = undefined;
          continue;
        }
        if (atEnd) {
          atEnd = false;
          await store.waitForEvents(checkpoint, idlePollMs, this.abort.signal);
          if (this.abort.signal.aborted) break;
        }
        const size = oneByOneUntil ? 1 : pageSize;
        const prefetched = nextPage && nextPage.after === checkpoint && nextPage.size === size ? nextPage : undefined;
        nextPage = undefined;
        // A stop does not wait for the read: an event store that never answers would hold it for the read's whole time limit.
        const {
          events,
          end: last,
          unreadable,
          read,
        } = await unlessAborted(prefetched?.page ?? readPage(store, checkpoint, size), this.abort.signal);
        if (!oneByOneUntil) pageSize = nextPageSize(size, read, sizes);
        // A short page ends the catch-up, but only once applied: its rows may be being read on the
        // catch-up's connection already (folded while the page before it was written).
        const catchUpEnds = read < size || oneByOneUntil !== undefined;
        if (!catchUpEnds && size > sizes.min) catchUp ??= await this.startCatchUp();
        if (read < size && cascadesPending) {
          cascadesPending = false;
          this.options.onCascadesPending?.();
        }
        if (last && !unreadable && read === size && !oneByOneUntil) {
          const page = readPage(store, last, pageSize);
          // Awaited at the next turn, or never if this batch fails: its own error, if any, is then irrelevant.
          page.catch(() => undefined);
          nextPage = { after: last, size: pageSize, page };
        }
        if (catchUpEnds && !last) endCatchUp();
        if (!last && !unreadable) {
          await store.waitForEvents(checkpoint, idlePollMs, this.abort.signal);
          idlePollMs = Math.min(idlePollMs * 2, maxIdlePollMs);
          continue;
        }
        idlePollMs = minIdlePollMs;
        if (last) {
          const started = performance.now();
          const folder = catchUp;
          const upcoming = folder ? nextPage : undefined;
          const foldFollowing =
            folder && upcoming
              ? (pending: BatchChanges) => {
                  upcoming.folded = upcoming.page.then((page) =>
                    page.end ? this.fold(page.events, { catchUp: folder, pending }, () => this.renew(client)) : undefined,
                  );
                  // Awaited at the next turn, or never if this batch fails: its own error, if any, is then irrelevant.
                  upcoming.folded.catch(() => undefined);
                }
              : undefined;
          let changes: BatchChanges;
          try {
            changes = await this.applyEvents(client, { from: checkpoint, to: last, rowTables }, events, {
              catchUp,
              folded: prefetched?.folded,
              foldFollowing,
            });
          } catch (error) {
            endCatchUp();
            // A page of only foreign events applies nothing: its failure is not an event's.
            if (!failedOnItsEvents(error) || events.length === 0) throw error;
            if (events.length > 1) {
              // Which event it was: the same events again, one at a time.
              this.options.logger.warn(
                { err: (error as Error).message, events: events.length },
                'batch failed; applying its events one at a time to find the one that fails',
              );
              oneByOneUntil = last;
              continue;
            }
            stoppedAt = await this.stopAt(client, checkpoint, addressOf(events[0]!), (error as Error).message);
            if (!stoppedAt) checkpoint = last;
            continue;
          }
          if (catchUpEnds) endCatchUp();
          this.options.onBatchApplied?.(events.length, (performance.now() - started) / 1000);
          checkpoint = last;
          atEnd = read < size && !oneByOneUntil && !unreadable;
          this.failures = 0; // back-off grows while batches keep failing, and only then
          progress.advance(checkpoint);
          if (oneByOneUntil && comparePositions(checkpoint, oneByOneUntil) >= 0) oneByOneUntil = undefined;
          if (retrying && comparePositions(checkpoint, retrying) >= 0) {
            await markRetried(client, retrying);
            this.options.logger.info({ position: encodePosition(retrying) }, 'dead letter applied on retry; projecting again');
            retrying = undefined;
          }
          if (changes.pendingCascades.length > 0) cascadesPending = true;
        }
        if (unreadable) {
          stoppedAt = await this.stopAt(client, checkpoint, unreadable.event, unreadable.reason);
          if (!stoppedAt) checkpoint = unreadable.event.position;
        }
      }
    } finally {
      endCatchUp();
    }
  }

  /**
   * The policy for an event of the service's own that cannot be applied: stop at it, so that the
   * read tables stay a faithful prefix of the log (docs/production.md). Recorded as a dead letter
   * and logged; undefined if an operator had already skipped it, which is then passed over.
   */
  private async stopAt(client: pg.Client, checkpoint: GlobalPosition, event: EventAddress, error: string): Promise<DeadLetter | undefined> {
    const deadLetter = await recordDeadLetter(client, event, error);
    if (deadLetter.resolution === 'skipped') {
      await this.passOver(client, checkpoint, deadLetter);
      return undefined;
    }
    this.options.logger.error(
      {
        deadLetter: deadLetter.deadLetterId,
        stream: event.streamName,
        version: event.version.toString(),
        type: event.type,
        eventId: event.id,
        position: encodePosition(event.position),
        attempts: deadLetter.attempts,
        err: error,
      },
      'projector stopped at an event it cannot apply; resolve it with npm run projections:dead-letters',
    );
    this.options.progress.stop(event.position);
    return deadLetter;
  }

  /** Moves the checkpoint over a skipped dead letter, applying nothing for it; the events before it are applied already. */
  private async passOver(client: pg.Client, checkpoint: GlobalPosition, skipped: DeadLetter): Promise<GlobalPosition> {
    await this.applyEvents(client, { from: checkpoint, to: skipped.position }, []);
    this.options.logger.warn({ deadLetter: skipped.deadLetterId, position: encodePosition(skipped.position) }, 'skipped a dead letter');
    this.options.progress.advance(skipped.position);
    return skipped.position;
  }

  /**
   * Applies a batch: its rows, counts and checkpoint move are one statement (writeChanges), and so
   * one transaction, conditional on the checkpoint; the rows it folds over were read just before
   * (or kept from the batches before, while catching up), and only a projector that moved the
   * checkpoint since, or a rebuild that replaced the tables, could have changed them, which makes the
   * write match nothing. No BEGIN and COMMIT round trips: without them the projection lag at half
   * load fell from 2.5 to under 1 ms at the median (`npm run bench`). With a `beforeCommit` hook
   * (tests that crash the projector between writing and committing) the batch runs in an explicit
   * transaction, so that there is such a moment.
   */
  private async applyEvents(
    client: pg.Client,
    move: { from: GlobalPosition; to: GlobalPosition; rowTables?: RowTables },
    events: LoggedEvent[],
    pipeline: {
      catchUp?: CatchUp;
      /** The batch folded already, while the one before it was written. */
      folded?: Promise<FoldedBatch | undefined>;
      /** Starts folding the next batch over this one's changes, while this one is written. */
      foldFollowing?: (pending: BatchChanges) => void;
    } = {},
  ): Promise<BatchChanges> {
    const { beforeCommit } = this.options;
    const { catchUp, foldFollowing } = pipeline;
    // A batch may wait in this process with its session idle (rows loaded on the catch-up's own
    // connection, a test's pause before it commits): the sign of life goes on meanwhile, at the
    // turns of the event loop, for as long as a batch may reasonably take. (A long fold holds the
    // event loop itself: `fold` renews before it.) A renewal that fails is told by the checkpoint's
    // move, or by the next renewal of the loop.
    const started = performance.now();
    const keepAlive = setInterval(() => {
      if (performance.now() - started > batchKeepAliveMs) clearInterval(keepAlive);
      else this.renew(client).catch(() => undefined);
    }, this.options.renewEveryMs ?? 500);
    if (beforeCommit) await client.query('BEGIN');
    try {
      const { loaded, changes } =
        (await pipeline.folded) ?? (await this.fold(events, catchUp ? { catchUp, pending: undefined } : client, () => this.renew(client)));
      // Folded at length: renewed again before the write is prepared, which for such a batch takes a while too.
      if (loaded.solutions.size > manyRows) await this.renew(client);
      // Kept before the write, for the next batch folded meanwhile; a failed write drops them all.
      catchUp?.cache.remember(changes, loaded);
      foldFollowing?.(changes);
      const moved = await writeChanges(
        client,
        { ...changes, feed: changeEntriesOf(events) },
        {
          ...move,
          notify: { channel: progressChannel, payload: encodePosition(move.to) },
        },
      );
      if (!moved) throw new LostLeadership('the checkpoint was moved, or the read tables replaced, by another projector or a rebuild');
      if (beforeCommit) {
        await beforeCommit();
        await client.query('COMMIT');
      }
      return changes;
    } catch (error) {
      // The batch's own error is rethrown; a failed rollback means the connection is gone, and the batch with it.
      if (beforeCommit) await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    } finally {
      clearInterval(keepAlive);
    }
  }

  /**
   * Folds a batch over its rows: while catching up, those kept, the others read on the catch-up's
   * own connection with `pending` (the batch being written meanwhile) overlaid; otherwise read on
   * the projector's connection.
   */
  private async fold(
    events: LoggedEvent[],
    rows: { catchUp: CatchUp; pending: BatchChanges | undefined } | pg.Client,
    renew: () => Promise<void>,
  ): Promise<FoldedBatch> {
    const envelopes = events.map((logged) => logged.event);
    const loaded =
      rows instanceof pg.Client
        ? await loadRows(rows, rowsToLoad(events))
        : await rows.catchUp.cache.load(rows.catchUp.loader, envelopes, rows.pending);
    // The fold of that many rows holds the event loop for a while, where no timer renews: renewed just before.
    if (loaded.solutions.size > manyRows) await renew();
    return { loaded, changes: applyBatch(envelopes, loaded) };
  }

  /**
   * A log far ahead of the read tables (a fresh read database, one restored from an old backup) is
   * projected fastest the way a rebuild projects it: read stream by stream and bulk-loaded into new
   * tables (src/projections/rebuild), which then replace the live ones, with the checkpoint, in one
   * transaction. Worth it where that costs less than the backlog batch by batch: when the store can
   * read its log stream by stream (PostgreSQL) and the backlog is at least half the log. Any
   * failure (an event it cannot apply, an operator's rebuild running) leaves the tables as they
   * were, and the backlog is projected batch by batch, where a dead letter is recorded as usual.
   */
  private async bulkCatchUp(client: pg.Client, checkpoint: GlobalPosition): Promise<boolean> {
    const { store, logger, bulkCatchUpEvents } = this.options;
    if (bulkCatchUpEvents === undefined || !store.readLogByStream) return false;
    const end = await store.readLastPosition();
    if (!end) return false;
    const backlog = store.estimateEventsBetween(checkpoint, end);
    // The whole log, as the bulk load reads it from its start, wherever the checkpoint was.
    const total = store.estimateEventsBetween(startOfLog, end);
    if (backlog < bulkCatchUpEvents || backlog * 2 < total) return false;
    logger.info({ backlog }, 'projector far behind: projecting the backlog as a rebuild does, in bulk');
    // The sign of life goes on meanwhile, or a standby would take over, and with it the pace, for
    // every instance's estimate of the time left (readiness, metrics, commands): on the leader's
    // connection, one statement at a time. Should this projector have been replaced after all, the
    // renewal after the rebuild fails the same way and ends its session; a pace lost meanwhile is
    // told again 20,000 events later (until then, the last one told stands for 15 s).
    let pace: BulkPace | undefined;
    let ticking = false;
    const tick = async () => {
      if (ticking) return;
      ticking = true;
      try {
        await this.renew(client);
        const told = pace;
        pace = undefined;
        if (told) await client.query('SELECT pg_notify($1, $2)', [bulkPaceChannel, encodeBulkPace(told)]);
      } finally {
        ticking = false;
      }
    };
    // A renewal that fails here fails again after the bulk load, where it ends the session (above).
    const renewing = setInterval(() => void tick().catch(() => undefined), this.options.renewEveryMs ?? 500);
    try {
      const result = await rebuildReadModel({
        connectionString: this.options.connectionString,
        store,
        logger,
        signal: this.abort.signal,
        cachedRows: this.options.cachedRows,
        onProgress: ({ phase, done, elapsedMs }) => {
          if (phase !== 'copying' || done === 0 || elapsedMs <= 0) return;
          pace = { eventsPerSecond: done / (elapsedMs / 1000), eventsLeft: Math.max(0, total - done), from: checkpoint, to: end };
        },
      });
      logger.info({ events: result.events, eventsPerSecond: Math.round(result.eventsPerSecond) }, 'backlog projected in bulk');
      return true;
    } catch (error) {
      if (this.abort.signal.aborted) return false;
      logger.warn({ err: (error as Error).message }, 'bulk catch-up failed; projecting the backlog batch by batch');
      return false;
    } finally {
      clearInterval(renewing);
    }
  }

  private async startCatchUp(): Promise<CatchUp> {
    const loader = new pg.Client({ connectionString: this.options.connectionString, ...connectionSettings });
    // Errors reach the queries that fail with them; an idle connection's error needs no handling beyond that.
    loader.on('error', () => undefined);
    await loader.connect();
    return { cache: new RowCache(this.options.cachedRows ?? 100_000), loader };
  }

  /**
   * Renews the active projector's sign of life (at most every `renewEveryMs`); a leader that was
   * replaced finds out here. The sign of life is `renewed_at` in table `projector_leader`
   * (src/infra/migrations): a process that is alive but stuck (frozen, paused, starved) keeps its
   * session and so its lock; a standby that sees no renewal for `staleAfterMs`, while that session
   * runs no statement (replaceStuckLeader), ends that session, which frees the lock and aborts
   * whatever transaction the stuck projector had open, so it can never write after it wakes.
   */
  private async renew(client: pg.Client, claim = false): Promise<void> {
    if (!claim && performance.now() - this.lastRenewal < (this.options.renewEveryMs ?? 500)) return;
    const { rowCount } = await client.query(
      claim
        ? `INSERT INTO projector_leader (name, pid, backend_start, renewed_at)
           SELECT $1, pid, backend_start, clock_timestamp() FROM pg_stat_activity WHERE pid = pg_backend_pid()
           ON CONFLICT (name) DO UPDATE SET pid = excluded.pid, backend_start = excluded.backend_start, renewed_at = clock_timestamp()`
        : 'UPDATE projector_leader SET renewed_at = clock_timestamp() WHERE name = $1 AND pid = pg_backend_pid()',
      [projectorName],
    );
    if (rowCount !== 1) throw new LostLeadership('another projector took over');
    this.lastRenewal = performance.now();
  }

  /**
   * The lock is held, so its holder's session is alive; if that holder has not renewed for
   * `staleAfterMs`, and its session has been waiting for it, running no statement, as long, it is
   * stuck: its session is ended, and the lock is free at the next try. A statement that runs long
   * (a batch deleting a workspace of many solutions, one waiting for a lock an operator holds) is
   * no sign of a stuck projector: another would run the same statement, or wait for the same lock.
   * One whose result waits for the process to read it (`ClientWrite`) is: the process is not
   * reading. PostgreSQL shows a session's start and state, and lets it be ended, only to its own user
   * (or one granted pg_read_all_stats and pg_signal_backend): instances connect as one user.
   */
  private async replaceStuckLeader(client: pg.Client): Promise<void> {
    const staleAfterMs = this.options.staleAfterMs ?? 2500;
    const { rows } = await client.query<{ pid: number; silent_ms: number }>(
      `SELECT l.pid, (extract(epoch FROM now() - l.renewed_at) * 1000)::int AS silent_ms
       FROM projector_leader l JOIN pg_stat_activity a ON a.pid = l.pid AND a.backend_start = l.backend_start
       WHERE l.name = $1 AND l.renewed_at < now() - make_interval(secs => $2::float8 / 1000)
         AND (a.state <> 'active' OR a.wait_event = 'ClientWrite')
         AND a.state_change < now() - make_interval(secs => $2::float8 / 1000)`,
      [projectorName, staleAfterMs],
    );
    const stuck = rows[0];
    if (!stuck) return;
    this.options.logger.warn(
      { pid: stuck.pid, silentMs: stuck.silent_ms },
      'the active projector stopped renewing; ending its session to take over',
    );
    await client.query('SELECT pg_terminate_backend($1)', [stuck.pid]);
  }

  private sleep(ms: number): Promise<void> {
    return sleepUnlessAborted(ms, this.abort.signal);
  }
}
