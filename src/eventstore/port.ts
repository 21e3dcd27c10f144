/**
 * The event store port. The PostgreSQL adapter is the embedded default; an EventStoreDB adapter
 * fits the same shape: streams with an expected version, and a global order with a position
 * that is a pair of numbers (EventStoreDB's commit/prepare; PostgreSQL's transaction id/sequence).
 */

export type GlobalPosition = Readonly<{ commit: bigint; prepare: bigint }>;

export const startOfLog: GlobalPosition = Object.freeze({ commit: 0n, prepare: 0n });

export function comparePositions(a: GlobalPosition, b: GlobalPosition): number {
  if (a.commit !== b.commit) return a.commit < b.commit ? -1 : 1;
  if (a.prepare !== b.prepare) return a.prepare < b.prepare ? -1 : 1;
  return 0;
}

/** A position as text, `commit:prepare`: in logs, messages and notifications. */
export const encodePosition = (position: GlobalPosition) => `${position.commit}:${position.prepare}`;

/** The furthest of some positions; undefined when there are none. */
export function latestPosition(positions: (GlobalPosition | undefined)[]): GlobalPosition | undefined {
  return positions.reduce<GlobalPosition | undefined>(
    (latest, position) => (position && (!latest || comparePositions(position, latest) > 0) ? position : latest),
    undefined,
  );
}

export type NewEvent = {
  /** A UUID. Deterministic per command attempt, so that a retried append is recognised, not doubled. */
  id: string;
  type: string;
  data: unknown;
  metadata: unknown;
};

export type RecordedEvent = {
  id: string;
  streamName: string;
  /** 1-based number of the event within its stream. */
  version: bigint;
  type: string;
  data: unknown;
  metadata: unknown;
  position: GlobalPosition;
};

/**
 * Where a stream stands: the version its next append expects. One small value, so that whatever
 * else a writer must know of the stream's end (such as its last event's hash) can join it.
 */
export type StreamHead = Readonly<{
  version: bigint;
  /** The hash of the stream's last event of the service's own: the next one's `previous_hash` (src/integrity/hashes.ts). */
  hash: string;
}>;

/** A stream that does not exist yet: no events, and the hash chain's start (64 zeros, contract §16). */
export const emptyStreamHead: StreamHead = Object.freeze({ version: 0n, hash: '0'.repeat(64) });

/**
 * Which of a stream's events a read returns. Forwards (the default): from version `from`
 * (1-based, inclusive; default 1) towards the last. Backwards: from `from` (default the last)
 * towards the first, newest first. At most `limit` events (default all).
 */
export type StreamRange = Readonly<{ from?: bigint; limit?: number; direction?: 'forwards' | 'backwards' }>;

export type AppendResult = {
  /** The stream's version after the append: the number of events it holds. */
  version: bigint;
  /** Global position of the last appended event. */
  position: GlobalPosition;
};

/** The stream did not have the expected version: someone else appended first. */
export class StreamVersionConflict extends Error {
  constructor(
    readonly streamName: string,
    readonly expectedVersion: bigint,
  ) {
    super(`stream ${streamName} is not at version ${expectedVersion}`);
    this.name = 'StreamVersionConflict';
  }
}

/** The store cannot be reached; commands answer 503 `unavailable`. */
export class EventStoreUnavailable extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'EventStoreUnavailable';
  }
}

/**
 * The store could not be connected to (refused, no address, no connection to send on): the
 * request never left, so an append's outcome is known, nothing was written.
 */
export class EventStoreNotReached extends EventStoreUnavailable {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'EventStoreNotReached';
  }
}

/**
 * The store answered, and refused the request: not an outage, so retrying does not help and
 * nothing was written. A bug (or a store set up differently from what the service expects); the
 * API answers 500 and logs it.
 */
export class EventStoreRefused extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'EventStoreRefused';
  }
}

/**
 * The whole log up to a consistent point, read stream by stream: what a bulk rebuild reads, so that
 * each record can be folded on its own (src/projections/rebuild/bulk.ts).
 */
export type StreamOrderedLog = {
  /** The last position the read covers: it holds every event at or before it and none after it. Undefined: the log is empty. */
  end: GlobalPosition | undefined;
  /** The events in pages: all of one stream together, oldest first; the streams in no order the reader may rely on. */
  pages: AsyncIterable<RecordedEvent[]>;
};

export interface EventStore {
  /**
   * Appends atomically if the stream holds exactly `expectedVersion` events (0: the stream must not
   * exist). Throws StreamVersionConflict otherwise, unless the same event ids were already appended
   * at that version, in which case it answers as the first append did.
   */
  append(streamName: string, expectedVersion: bigint, events: NewEvent[]): Promise<AppendResult>;
  /**
   * Events of one stream in `range` (all of them, oldest first, without one), read in the range's
   * direction; an unknown stream, or a range past its end, is empty. Costs what the range holds,
   * not what the stream holds.
   */
  readStream(streamName: string, range?: StreamRange): Promise<RecordedEvent[]>;
  /**
   * Events after `after` in global order, at most `limit`. Never skips an event that commits later.
   * Only the service's streams (src/eventstore/stream-names.ts): an adapter leaves out everything
   * else a shared store holds. Read them in domain terms through src/eventstore/event-log.ts.
   */
  readAll(after: GlobalPosition, limit: number): Promise<RecordedEvent[]>;
  /**
   * Optional, only where the store can read its log stream by stream in one consistent snapshot
   * (the PostgreSQL store; EventStoreDB and the in-memory store have no such read). Hands the read
   * to `consume` and ends it (its connection released) when `consume` settles. Like readAll, only
   * the service's streams.
   */
  readLogByStream?<T>(consume: (log: StreamOrderedLog) => Promise<T>): Promise<T>;
  /**
   * The position of the log's last event as readers see it now (an event that commits later may
   * still come before it), of any stream: readAll may leave it out. Undefined for an empty log.
   */
  readLastPosition(): Promise<GlobalPosition | undefined>;
  /**
   * How many events lie after `from`, up to and including `to`, as the adapter can tell without
   * reading them: exact in memory, the difference of PostgreSQL's event numbers (which counts
   * numbers rolled-back appends took), EventStoreDB's log distance over its recent bytes per event.
   * Never negative.
   */
  estimateEventsBetween(from: GlobalPosition, to: GlobalPosition): number;
  /** Resolves once events after `after` may be readable, when `signal` aborts, or after `timeoutMs`. */
  waitForEvents(after: GlobalPosition, timeoutMs: number, signal: AbortSignal): Promise<void>;
  /** Throws when the store cannot be reached. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
