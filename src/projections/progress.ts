import type { Logger } from 'pino';
import { readPage } from '../eventstore/event-log.js';
import { comparePositions, encodePosition, startOfLog, type EventStore, type GlobalPosition } from '../eventstore/port.js';
import type { PgListener, Pool } from '../infra/postgres.js';
import { ProgressSamples } from './catch-up.js';
import { PositionWaits } from './position-waits.js';
import { blockedChannel, blockingDeadLetter } from './dead-letters.js';
import { readCheckpoint } from './tables.js';

export const progressChannel = 'projection_progress';
/**
 * A bulk catch-up's pace, told by the projector that runs it: its checkpoint moves only when it is
 * done, so there is no other rate to estimate it by.
 */
export const bulkPaceChannel = 'projection_bulk_pace';

/** What a bulk catch-up tells: its rate, the events it has left, and the checkpoint it started from and the log's end it goes to. */
export type BulkPace = { eventsPerSecond: number; eventsLeft: number; from: GlobalPosition; to: GlobalPosition };

export const encodeBulkPace = (pace: BulkPace): string =>
  [Math.round(pace.eventsPerSecond), Math.round(pace.eventsLeft), encodePosition(pace.from), encodePosition(pace.to)].join('/');

function decodeBulkPace(payload: string): BulkPace | undefined {
  const [eventsPerSecond, eventsLeft, from, to] = payload.split('/');
  const [fromPosition, toPosition] = [decodePosition(from ?? ''), decodePosition(to ?? '')];
  if (!/^\d+$/.test(eventsPerSecond ?? '') || !/^\d+$/.test(eventsLeft ?? '') || !fromPosition || !toPosition) return undefined;
  return { eventsPerSecond: Number(eventsPerSecond), eventsLeft: Number(eventsLeft), from: fromPosition, to: toPosition };
}

/** How long a bulk catch-up's last told pace is believed: it is told every 20,000 events, and its index builds tell nothing for seconds. */
const bulkPaceLifetimeMs = 15_000;

/** A backlog this large is a catch-up (a restored or new read database, a burst of imports), not the ordinary lag of a busy service. */
export const catchUpBacklogEvents = 10_000;

function decodePosition(payload: string): GlobalPosition | undefined {
  const match = /^(\d+):(\d+)$/.exec(payload);
  return match ? { commit: BigInt(match[1]!), prepare: BigInt(match[2]!) } : undefined;
}

/**
 * How far the projection has got, as seen by this instance: told directly by a local projector,
 * by NOTIFY from a projector in another instance, and by polling the checkpoint while anyone
 * waits (notifications are lost while the LISTEN connection is down). Commands wait here for
 * their events to be applied (read-your-writes, contract §11).
 */
export class ProjectionProgress {
  private checkpoint: GlobalPosition = startOfLog;
  private readonly waits = new PositionWaits();
  private pollTimer: NodeJS.Timeout | undefined;
  /** A position some command gave up waiting for; cleared once the projection passes it. */
  private stalledAt: GlobalPosition | undefined;
  /** Where the projector stopped at a dead letter (src/projections/dead-letters.ts); cleared once the projection passes it. */
  private stoppedAtDeadLetter: GlobalPosition | undefined;
  private readonly samples = new ProgressSamples();
  /**
   * When this instance first saw the present catch-up's backlog: only the rates measured since
   * show what the projector manages with events to apply. Before, they show only how fast events
   * arrived (a trickle, before a burst of imports).
   */
  private catchUpSeenAt: number | undefined;
  /** The pace of a bulk catch-up running now (bulkPaceChannel), as last told. */
  private bulkPace: (BulkPace & { at: number }) | undefined;

  constructor(
    private readonly pool: Pool,
    /** Counts the events between two positions, for the rate the projection moves at. */
    private readonly estimateEventsBetween: (from: GlobalPosition, to: GlobalPosition) => number,
    listener: PgListener,
    private readonly logger: Logger,
    private readonly pollIntervalMs = 200,
  ) {
    listener.on(progressChannel, (payload) => {
      const position = decodePosition(payload);
      if (position) this.advance(position);
    });
    listener.on(bulkPaceChannel, (payload) => {
      const pace = decodeBulkPace(payload);
      if (pace) this.bulkPace = { ...pace, at: performance.now() };
    });
    listener.on(blockedChannel, (payload) => {
      const position = decodePosition(payload);
      if (position) this.stop(position);
    });
    listener.onReconnect(() => void this.refresh());
  }

  get current(): GlobalPosition {
    return this.checkpoint;
  }

  get stalled(): boolean {
    return this.stalledAt !== undefined;
  }

  /** Whether the projector is stopped at a dead letter: nothing after the checkpoint gets projected until an operator acts. */
  get stopped(): boolean {
    return this.stoppedAtDeadLetter !== undefined;
  }

  /** The projector stopped at a dead letter at `position`: every wait beyond the checkpoint ends now, unreached. */
  stop(position: GlobalPosition): void {
    if (comparePositions(position, this.checkpoint) <= 0) return;
    this.stoppedAtDeadLetter = position;
    this.waits.end(false);
  }

  advance(position: GlobalPosition): void {
    if (comparePositions(position, this.checkpoint) <= 0) return;
    this.checkpoint = position;
    // A bulk catch-up moves the checkpoint once, when it is done.
    this.bulkPace = undefined;
    this.samples.record(performance.now(), position);
    if (this.stalledAt && comparePositions(position, this.stalledAt) >= 0) this.stalledAt = undefined;
    if (this.stoppedAtDeadLetter && comparePositions(position, this.stoppedAtDeadLetter) >= 0) this.stoppedAtDeadLetter = undefined;
    this.waits.reach(position);
  }

  async refresh(): Promise<void> {
    try {
      const [checkpoint, deadLetter] = await Promise.all([readCheckpoint(this.pool), blockingDeadLetter(this.pool)]);
      this.advance(checkpoint);
      // A resolved dead letter is never cleared here but by the checkpoint passing it (advance): this
      // read may have started before the projector recorded one that a notification already reported.
      if (deadLetter) this.stop(deadLetter.position);
    } catch (error) {
      // Safe to leave at that: nothing moves backwards, and the next notification, the poll of every
      // wait in progress (pollIntervalMs) or the listener's reconnection reads it again.
      this.logger.debug({ err: (error as Error).message }, 'could not read the projection checkpoint');
    }
  }

  /**
   * True once the projection has applied `position`; false if `timeoutMs` passed first, or at once
   * while the projector is stopped at a dead letter: waiting cannot help then. A command's wait that
   * runs out makes the instance not ready until the projection passes `position` (a command's
   * events are the service's, which the checkpoint lands on); a readiness probe's does not, since
   * the log's end it waits for may be an event the checkpoint never lands on (another program's).
   */
  waitFor(position: GlobalPosition, timeoutMs: number, { stallOnTimeout = true } = {}): Promise<boolean> {
    if (comparePositions(this.checkpoint, position) >= 0) return Promise.resolve(true);
    if (this.stoppedAtDeadLetter) return Promise.resolve(false);
    const reached = this.waits.wait(position, timeoutMs, stallOnTimeout ? { onTimeout: () => this.markStalled(position) } : {});
    this.ensurePolling();
    return reached;
  }

  /**
   * True once the projection has moved past `position`; false when `timeoutMs` passed first, or
   * `signal` aborted. A wait for news (the change feed's long poll, the webhook dispatcher's idle
   * wait): running out is no stall, and /readyz is not told. Its listener on `signal` goes with it:
   * a long-lived signal (a stream's, the dispatcher's) is waited on again and again.
   */
  waitPast(position: GlobalPosition, timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
    if (comparePositions(this.checkpoint, position) > 0) return Promise.resolve(true);
    const moved = this.waits.waitPast(position, timeoutMs, signal);
    this.ensurePolling();
    return moved;
  }

  /** Events per second the projection has moved at over the last seconds, as this instance saw it; 0 when unknown or stopped. */
  eventsPerSecond(): number {
    return this.samples.eventsPerSecond(performance.now(), this.estimateEventsBetween);
  }

  /** Seconds until the projection reaches `position` at its present rate; undefined when there is no rate to go by. */
  secondsToReach(position: GlobalPosition): number | undefined {
    if (comparePositions(this.checkpoint, position) >= 0) return 0;
    const bulk = this.bulkSecondsTo(position);
    if (bulk !== undefined) return bulk;
    const rate = this.eventsPerSecond();
    return rate > 0 ? this.estimateEventsBetween(this.checkpoint, position) / rate : undefined;
  }

  /**
   * Seconds until a bulk catch-up running now reaches `position`, at the pace it last told; undefined
   * when none runs from this checkpoint (a pace told by a projector replaced since is not believed).
   */
  private bulkSecondsTo(position: GlobalPosition): number | undefined {
    const pace = this.bulkPace;
    if (!pace || pace.eventsPerSecond <= 0 || performance.now() - pace.at > bulkPaceLifetimeMs) return undefined;
    if (comparePositions(pace.from, this.checkpoint) !== 0) return undefined;
    const beyond = comparePositions(position, pace.to) > 0 ? this.estimateEventsBetween(pace.to, position) : 0;
    return (pace.eventsLeft + beyond) / pace.eventsPerSecond;
  }

  /**
   * A command's wait for `position` given up before it starts, when it is certain to fail: the
   * projection is catching up a backlog (at least {@link catchUpBacklogEvents} events before the
   * command's), and even at the fastest rate it has shown since that backlog was seen it needs
   * more than twice `timeoutMs` for it. An ordinary lag, or a rate not known, is waited for as usual. Reported as
   * stalled, like a wait that ran out.
   */
  outOfReach(position: GlobalPosition, timeoutMs: number): boolean {
    // Applied already (a keyed retry answered from old events): no wait, and no news of the backlog.
    if (comparePositions(this.checkpoint, position) >= 0) return false;
    const backlog = this.estimateEventsBetween(this.checkpoint, position);
    this.noteBacklog(backlog);
    if (this.catchUpSeenAt === undefined) return false;
    const seconds =
      this.bulkSecondsTo(position) ??
      backlog / this.samples.peakEventsPerSecond(performance.now(), this.estimateEventsBetween, this.catchUpSeenAt);
    if (!Number.isFinite(seconds) || seconds * 1000 <= 2 * timeoutMs) return false;
    this.markStalled(position);
    return true;
  }

  /** The events between the checkpoint and the log's end as just measured: the start (or end) of a catch-up. */
  noteBacklog(events: number): void {
    if (events < catchUpBacklogEvents) this.catchUpSeenAt = undefined;
    else this.catchUpSeenAt ??= performance.now();
  }

  close(): void {
    this.waits.end(true);
    clearTimeout(this.pollTimer);
  }

  /** Not ready until the projection passes the earliest position a command gave up waiting for. */
  private markStalled(position: GlobalPosition): void {
    if (!this.stalledAt || comparePositions(position, this.stalledAt) < 0) this.stalledAt = position;
  }

  private ensurePolling(): void {
    if (this.pollTimer) return;
    const poll = async () => {
      await this.refresh();
      this.pollTimer = this.waits.size > 0 ? setTimeout(poll, this.pollIntervalMs) : undefined;
    };
    this.pollTimer = setTimeout(poll, this.pollIntervalMs);
  }
}

/**
 * How far the projection trails the log, as this instance sees it: the events after its
 * checkpoint (at most `limit` are read) and the age of the oldest of them (0 when there are none).
 */
export async function measureProjectionLag(
  store: EventStore,
  progress: ProjectionProgress,
  limit: number,
): Promise<{ events: number; seconds: number }> {
  await progress.refresh();
  const { events } = await readPage(store, progress.current, limit);
  const oldest = events[0]?.event.metadata.occurred_at;
  return { events: events.length, seconds: oldest ? Math.max(0, (Date.now() - Date.parse(oldest)) / 1000) : 0 };
}
