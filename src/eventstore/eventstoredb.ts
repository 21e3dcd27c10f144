import {
  BACKWARDS,
  CancelledError,
  convertToCommandError,
  DeadlineExceededError,
  END,
  EventStoreDBClient,
  FORWARDS,
  isCommandError,
  jsonEvent,
  NO_STREAM,
  NotLeaderError,
  START,
  StreamNotFoundError,
  streamNameFilter,
  TimeoutError,
  UnavailableError,
  UnknownError,
  WrongExpectedVersionError,
  type AllStreamResolvedEvent,
  type AllStreamSubscription,
  type JSONType,
  type Position,
  type ReadPosition,
  type ResolvedEvent,
  type StreamingRead,
} from '@eventstore/db-client';
import type { Logger } from 'pino';
import {
  comparePositions,
  EventStoreRefused,
  EventStoreNotReached,
  EventStoreUnavailable,
  startOfLog,
  StreamVersionConflict,
  type AppendResult,
  type EventStore,
  type GlobalPosition,
  type NewEvent,
  type RecordedEvent,
  type StreamRange,
} from './port.js';
import { isServiceStream, streamPrefixes } from './stream-names.js';

export type EventStoreDBOptions = {
  logger?: Logger;
  /** Appends, stream reads and pings (the command path) give up after this and answer unavailable. */
  commandTimeoutMs?: number;
  /** One page of a `$all` read (the projector's path). */
  readTimeoutMs?: number;
};

const prefixes = Object.values(streamPrefixes);
/** ESDB revisions are 0-based; the port's versions count events, so revision r is version r + 1. */
const expectedRevision = (expectedVersion: bigint) => (expectedVersion === 0n ? NO_STREAM : expectedVersion - 1n);
const readPosition = (position: GlobalPosition): ReadPosition =>
  comparePositions(position, startOfLog) === 0 ? START : { commit: position.commit, prepare: position.prepare };
/** Stream reads carry the `$all` position on servers from 22.6; older ones send none (or 2^64-1). */
const noPosition = 2n ** 64n - 1n;
/** About one log record of a small event (metadata included), until pages read tell better. */
const typicalBytesPerEvent = 400;

/**
 * The log's bytes per event (positions are byte offsets in the log), learnt from the pages of
 * `$all` read, each stretch of the log once however often it is read again: a readiness probe
 * reads the event at the projection's checkpoint many times a second, and when each page set the
 * figure, a catch-up's estimates jumped with whatever size that one record had. Starts from a
 * small event's record, worth a few events, and halves what it learnt as it grows, so that it
 * follows the log's recent events.
 */
class LogDensity {
  private static readonly priorEvents = 32;
  private static readonly rememberedEvents = 100_000;
  private bytes = typicalBytesPerEvent * LogDensity.priorEvents;
  private events = LogDensity.priorEvents;
  /** The commit position up to which the log is learnt. */
  private learnedTo = -1n;

  /** Learns from a page's commit positions (ascending): the stretch after what is learnt already. */
  learn(positions: readonly bigint[]): void {
    const first = positions.findIndex((position) => position >= this.learnedTo);
    const last = positions.length - 1;
    if (first === -1 || first === last) return;
    this.bytes += Number(positions[last]! - positions[first]!);
    this.events += last - first;
    this.learnedTo = positions[last]!;
    if (this.events > LogDensity.rememberedEvents) {
      this.bytes /= 2;
      this.events /= 2;
    }
  }

  get bytesPerEvent(): number {
    return Math.max(1, this.bytes / this.events);
  }
}
const toGlobal = (position: Position | undefined): GlobalPosition | undefined =>
  position && position.commit !== noPosition ? { commit: position.commit, prepare: position.prepare } : undefined;

type StoredEvent = NonNullable<ResolvedEvent['event']>;

const toRecordedEvent = (event: StoredEvent, position: GlobalPosition): RecordedEvent => ({
  id: event.id,
  streamName: event.streamId,
  version: event.revision + 1n,
  type: event.type,
  data: event.data,
  metadata: event.metadata ?? null,
  position,
});

/**
 * What KurrentDB says when it does not handle a request now (ClientMessage.NotHandled): not ready,
 * too busy, or no leader known during an election. BatchAppend sends these as a per-write status
 * without a code, and a read as UNKNOWN (Grpc/Streams.BatchAppend.cs; Grpc/RpcExceptions.cs,
 * NoLeaderInfo): the client reads both as UnknownError.
 */
const notHandledNow = /Server Is Not Ready|Server Is (Too )?Busy|No leader info available/;

/**
 * Outages: the store cannot be reached, or not in time, or does not handle the request now;
 * retrying later helps. Any other UNKNOWN is a refusal: KurrentDB also answers UNKNOWN for
 * requests it will not serve, such as a read from a position that is no record's or an operation
 * result a call does not expect (Grpc/RpcExceptions.cs, UnknownError; Grpc/Streams.Read.cs).
 */
function isUnavailable(error: unknown): boolean {
  if (error instanceof EventStoreUnavailable) return true;
  if (!(error instanceof Error)) return false;
  const converted = convertToCommandError(error);
  return (
    converted instanceof UnavailableError ||
    converted instanceof CancelledError ||
    converted instanceof DeadlineExceededError ||
    converted instanceof TimeoutError ||
    converted instanceof NotLeaderError ||
    (converted instanceof UnknownError && notHandledNow.test(converted.message)) ||
    /Failed to discover|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENOTFOUND/i.test(error.message)
  );
}

/**
 * A failure before the call left this process: gRPC had no connection to send it on (it answers
 * "No connection established" for a call started while the channel cannot connect), the node
 * refused the connection, or no node was found. A connection lost mid-call is not one of these.
 */
function notSent(error: unknown): boolean {
  return error instanceof Error && /No connection established|ECONNREFUSED|Failed to discover|ENOTFOUND/i.test(error.message);
}

/** The answers the adapter turns into the port's own outcomes; any other answer from the server is a refusal. */
const handledByTheAdapter = (error: unknown) => error instanceof WrongExpectedVersionError || error instanceof StreamNotFoundError;

/**
 * The event store port on EventStoreDB. Commands append with an explicit expected revision and
 * their deterministic event ids; domain deletes are events, so streams are never deleted here.
 * The client connects lazily and reconnects on the next call after a failure, so the service
 * starts without EventStoreDB and recovers without a restart; every call is bounded in time.
 */
export class EventStoreDBEventStore implements EventStore {
  private readonly client: EventStoreDBClient;
  private readonly commandTimeoutMs: number;
  private readonly readTimeoutMs: number;
  /** Where the last `$all` scan ended without finding anything of ours after `after`. */
  private scanned: { after: GlobalPosition; to: GlobalPosition } | undefined;
  /** What estimateEventsBetween divides by. */
  private readonly density = new LogDensity();
  /** Appends waiting for their answer, and how many were ever begun: whether a failure can be another's (append). */
  private appendsInFlight = 0;
  private appendsStarted = 0;
  /** While set and in the future, waitForEvents polls instead of subscribing (back-off after a failed subscription). */
  private subscribeAgainAt = 0;
  private subscribeFailures = 0;

  constructor(
    connectionString: string,
    private readonly options: EventStoreDBOptions = {},
  ) {
    this.client = EventStoreDBClient.connectionString(connectionString);
    this.commandTimeoutMs = options.commandTimeoutMs ?? 3000;
    this.readTimeoutMs = options.readTimeoutMs ?? 15_000;
  }

  async append(streamName: string, expectedVersion: bigint, events: NewEvent[]): Promise<AppendResult> {
    const overlappedAtStart = this.appendsInFlight > 0;
    const started = ++this.appendsStarted;
    this.appendsInFlight += 1;
    try {
      const result = await this.bounded('append', this.commandTimeoutMs, (deadline) =>
        this.client.appendToStream(
          streamName,
          events.map((event) => jsonEvent({ id: event.id, type: event.type, data: event.data as JSONType, metadata: event.metadata })),
          { expectedRevision: expectedRevision(expectedVersion), deadline },
        ),
      );
      // KurrentDB answers a write with its last event's log position as both commit and prepare
      // (RequestManager/Managers/WriteEvents.cs passes CommitPosition twice; RequestManagerBase.cs
      // takes it from the CommitIndexed of the write's last, self-committed prepare, which
      // StorageChaser.cs publishes at that prepare's LogPosition), and that is the event's `$all`
      // position. A recognised repeat is answered the same way, with the original write's last
      // event (Storage/ReaderIndex/IndexWriter.cs, CheckCommit "Idempotent"; RequestManagerBase.cs
      // ReturnCommitAt). Only a repeat whose last event the index cannot read answers without one
      // (Grpc/Streams.Append.cs, NoPosition): the events are stored, so the outcome is reported unknown.
      const position = toGlobal(result.position);
      if (!position) throw new EventStoreUnavailable('the event store did not report where the append landed');
      return { version: expectedVersion + BigInt(events.length), position };
    } catch (error) {
      // A retry of the same event ids at the same expected revision is recognised by the server
      // itself (IndexWriter.cs, the "strong idempotency checks" for an exact or no-stream expected
      // revision, the only two this adapter sends), so a wrong expected version is a real conflict.
      if (error instanceof WrongExpectedVersionError) throw new StreamVersionConflict(streamName, expectedVersion);
      // The client rejects every append waiting for an answer when any batch-append stream fails
      // (its table of them is shared): another append's connection never made says nothing of this
      // one, which may have been sent. Only an append alone from start to failure is not reached.
      if (error instanceof EventStoreNotReached && (overlappedAtStart || this.appendsStarted !== started)) {
        throw new EventStoreUnavailable(error.message, { cause: error.cause });
      }
      throw error;
    } finally {
      this.appendsInFlight -= 1;
    }
  }

  async readStream(streamName: string, range: StreamRange = {}): Promise<RecordedEvent[]> {
    const events = await this.readStreamRange(streamName, range);
    // Positions are absent only on servers older than 22.6; history and folds do not use them.
    return events.map((event) => toRecordedEvent(event, toGlobal(event.position) ?? startOfLog));
  }

  async readAll(after: GlobalPosition, limit: number): Promise<RecordedEvent[]> {
    const found: RecordedEvent[] = [];
    // A read from an event's position includes that event (Storage/ReaderIndex/AllReader.cs), so
    // one more than `limit` fills the page when every event is ours; further pages, only needed
    // past foreign events, read at least a few hundred at a time.
    let pageSize = limit + 1;
    let from = this.scanned && comparePositions(this.scanned.after, after) === 0 ? this.scanned.to : after;
    for (;;) {
      const page = await this.collect('read $all', this.readTimeoutMs, () =>
        this.client.readAll({ fromPosition: readPosition(from), maxCount: pageSize }),
      );
      // Before the page is taken from: a full page of ours returns from within.
      this.density.learn(page.flatMap(({ event }) => (event ? [event.position.commit] : [])));
      for (const { event } of page) {
        if (!event) continue;
        const position = event.position;
        // A read from a position may include the event at it: `after` and the page seam are skipped.
        if (comparePositions(position, after) <= 0 || comparePositions(position, from) <= 0) continue;
        if (!isServiceStream(event.streamId) || event.type.startsWith('$')) continue;
        found.push(toRecordedEvent(event, position));
        if (found.length === limit) return found;
      }
      const lastSeen = page[page.length - 1]?.event?.position;
      if (page.length < pageSize || !lastSeen) {
        // The end of the log: nothing of ours lies between the last event found and `lastSeen`, and
        // the log only grows at its end, so the next read from there may start at `lastSeen`.
        if (lastSeen) this.scanned = { after: found[found.length - 1]?.position ?? after, to: lastSeen };
        return found;
      }
      from = lastSeen;
      pageSize = Math.max(limit + 1, 256);
    }
  }

  /**
   * A catch-up subscription to `$all` from `after`, filtered to the service's streams, that only
   * wakes the caller: the projector then reads from the checkpoint it stored itself, so an event
   * is never lost with a dropped subscription, nor applied twice. A subscription that fails
   * (UnavailableError, CancelledError, connection loss) turns this into polling until a back-off
   * has passed; the next call subscribes again.
   */
  waitForEvents(after: GlobalPosition, timeoutMs: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      let subscription: AllStreamSubscription | undefined;
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        // Unsubscribing only stops a wake-up this caller no longer waits for; a failure leaves nothing behind.
        subscription?.unsubscribe().catch(() => undefined);
        subscription = undefined;
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      signal.addEventListener('abort', done);
      if (signal.aborted) return done();
      if (Date.now() < this.subscribeAgainAt) return;
      const current = this.client.subscribeToAll({
        fromPosition: readPosition(after),
        filter: streamNameFilter({ prefixes }),
      });
      subscription = current;
      current.on('confirmation', () => {
        this.subscribeFailures = 0;
      });
      current.on('data', (resolved: AllStreamResolvedEvent) => {
        this.subscribeFailures = 0;
        const position = resolved.event?.position;
        if (position && comparePositions(position, after) > 0) done();
      });
      // Keeps an error from ever being unhandled, also after unsubscribing.
      current.on('error', (error: Error) => {
        if (subscription !== current) return;
        subscription = undefined;
        this.subscribeFailures += 1;
        const backOffMs = Math.min(100 * 2 ** this.subscribeFailures, 5000);
        this.subscribeAgainAt = Date.now() + backOffMs;
        this.options.logger?.warn(
          { err: error.message, retryInMs: backOffMs },
          'EventStoreDB subscription failed; polling until it is back',
        );
      });
    });
  }

  /** The last event of `$all`, of any stream: readAll may leave it out (foreign and system events). */
  async readLastPosition(): Promise<GlobalPosition | undefined> {
    const [last] = await this.collect('read $all backwards', this.readTimeoutMs, () =>
      this.client.readAll({ fromPosition: END, direction: BACKWARDS, maxCount: 1 }),
    );
    return last?.event?.position;
  }

  estimateEventsBetween(from: GlobalPosition, to: GlobalPosition): number {
    return Math.max(0, Math.round(Number(to.commit - from.commit) / this.density.bytesPerEvent));
  }

  async ping(): Promise<void> {
    await this.collect('ping', this.commandTimeoutMs, () => this.client.readAll({ fromPosition: END, direction: BACKWARDS, maxCount: 1 }));
  }

  async close(): Promise<void> {
    // Closing: a stream that fails to close is gone with the client.
    await this.client.dispose().catch(() => undefined);
  }

  /**
   * The events of one stream in `range`; an unknown stream is empty. From the leader only: after
   * an election a follower may not have a command's latest events yet (NotLeaderError makes the
   * client reconnect to the new leader). Revisions are 0-based: version v is revision v - 1.
   */
  private async readStreamRange(streamName: string, range: StreamRange): Promise<StoredEvent[]> {
    const backwards = range.direction === 'backwards';
    const fromRevision = range.from === undefined ? (backwards ? END : START) : range.from - 1n;
    if ((typeof fromRevision === 'bigint' && fromRevision < 0n) || range.limit === 0) return [];
    try {
      const read = await this.collect('read stream', this.commandTimeoutMs, () =>
        this.client.readStream(streamName, {
          requiresLeader: true,
          fromRevision,
          direction: backwards ? BACKWARDS : FORWARDS,
          ...(range.limit === undefined ? {} : { maxCount: range.limit }),
        }),
      );
      return read.flatMap((resolved) => (resolved.event ? [resolved.event] : []));
    } catch (error) {
      if (error instanceof StreamNotFoundError) return [];
      throw error;
    }
  }

  /** Reads a whole (bounded) streaming read; the client gives streaming reads no deadline, so it is cancelled here. */
  private collect<E>(operation: string, timeoutMs: number, open: () => StreamingRead<E>): Promise<E[]> {
    return this.bounded(operation, timeoutMs, async (_deadline, onTimeout) => {
      const stream = open();
      // The read already failed by its timeout; cancelling only frees the stream.
      onTimeout(() => void stream.cancel().catch(() => undefined));
      const items: E[] = [];
      for await (const item of stream) items.push(item);
      return items;
    });
  }

  /**
   * Runs one call with a gRPC deadline and, around it, a timer of our own: the client applies no
   * deadline to streaming reads, discovery in a cluster and the batch-append stream are not
   * covered by one either, and a request must never hang.
   */
  private async bounded<T>(
    operation: string,
    timeoutMs: number,
    work: (deadline: number, onTimeout: (cancel: () => void) => void) => Promise<T>,
  ): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    let cancel: (() => void) | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        cancel?.();
        reject(new EventStoreUnavailable(`the event store did not answer (${operation}) within ${timeoutMs} ms`));
      }, timeoutMs + 250);
    });
    const attempt = work(timeoutMs, (onTimeout) => {
      cancel = onTimeout;
    });
    // Its failure is handled by the race below, or comes after the timeout already answered.
    attempt.catch(() => undefined);
    try {
      return await Promise.race([attempt, timeout]);
    } catch (error) {
      if (error instanceof EventStoreUnavailable) throw error;
      if (isUnavailable(error)) {
        throw notSent(error)
          ? new EventStoreNotReached('the event store cannot be reached', { cause: error })
          : new EventStoreUnavailable('the event store cannot be reached', { cause: error });
      }
      const answer = error instanceof Error ? convertToCommandError(error) : error;
      if (answer instanceof Error && isCommandError(answer) && !handledByTheAdapter(answer)) {
        throw new EventStoreRefused(`the event store refused ${operation}: ${answer.message}`, { cause: error });
      }
      throw answer;
    } finally {
      clearTimeout(timer);
    }
  }
}
