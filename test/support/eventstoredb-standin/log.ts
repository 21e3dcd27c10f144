/**
 * The stand-in's storage: one in-memory transaction log, as a single KurrentDB node keeps it.
 * It stores what the gRPC layer needs and nothing else (no scavenging, no persistence, no
 * metadata streams). Each behaviour cites the KurrentDB source it imitates (paths in the
 * kurrent-io/KurrentDB repository).
 */

export type Position = { commit: bigint; prepare: bigint };

export const startOfLog: Position = Object.freeze({ commit: 0n, prepare: 0n });

export type StoredEvent = {
  id: string;
  stream: string;
  /** 0-based revision within the stream. */
  revision: bigint;
  /** The "type", "content-type" and "created" entries a read returns (Streams.Read.cs, ConvertToReadEvent). */
  type: string;
  contentType: string;
  created: bigint;
  data: Uint8Array;
  customMetadata: Uint8Array;
  position: Position;
};

export type ProposedEvent = Pick<StoredEvent, 'id' | 'type' | 'contentType' | 'data' | 'customMetadata'>;

/** The expected-revision cases of AppendReq.Options / BatchAppendReq.Options (streams.proto). */
export type ExpectedRevision = { kind: 'any' } | { kind: 'no_stream' } | { kind: 'stream_exists' } | { kind: 'revision'; revision: bigint };

export type AppendOutcome =
  | { kind: 'written'; currentRevision: bigint; position: Position }
  | { kind: 'wrong_expected_version'; currentRevision: bigint | undefined };

const ticksPerMillisecond = 10_000n;
/** `created` counts .NET ticks (100 ns) since the Unix epoch (Streams.Read.cs, ToTicksSinceEpoch). */
const ticksNow = () => BigInt(Date.now()) * ticksPerMillisecond;

/**
 * A record's size in the transaction file: a fixed header plus its variable parts. Positions are
 * byte offsets in that file (TFChunk), so they grow by the size of each record and are never
 * consecutive integers; the adapter must treat them as opaque.
 */
const recordSize = (stream: string, event: ProposedEvent) =>
  BigInt(120 + Buffer.byteLength(stream) + Buffer.byteLength(event.type) + event.data.length + event.customMetadata.length);

export class InMemoryLog {
  private readonly all: StoredEvent[] = [];
  private readonly streams = new Map<string, StoredEvent[]>();
  private readonly listeners = new Set<() => void>();
  /** Where the next record starts; a fresh node's first records sit after the chunk header. */
  private writerCheckpoint = 128n;

  constructor() {
    // A fresh node writes its epoch to `$epoch-information` first (EpochManager.cs), so the first
    // user event is never at the start of the log.
    this.append('$epoch-information', { kind: 'any' }, [
      {
        id: '00000000-0000-4000-8000-000000000001',
        type: '$epoch-information',
        contentType: 'application/json',
        data: Buffer.from(JSON.stringify({ epochNumber: 0 })),
        customMetadata: new Uint8Array(),
      },
    ]);
  }

  get size(): number {
    return this.all.length;
  }

  /** The position just past the last record, as a read from `$all` "end" sees it. */
  get end(): Position {
    return { commit: this.writerCheckpoint, prepare: this.writerCheckpoint };
  }

  stream(name: string): readonly StoredEvent[] | undefined {
    return this.streams.get(name);
  }

  /** Called after every write; subscriptions use it to push live events. */
  onWrite(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Appends atomically if `expected` holds. A write whose event ids are already the stream's events
   * at the expected revision is recognised as a repeat and answered as the first write was, without
   * writing again (IndexWriter.cs, CheckCommitStartingAt / CheckCommit: "Idempotent"); a repeat that
   * only partly matches is a wrong expected version ("CorruptedIdempotency" answers it so too).
   */
  append(stream: string, expected: ExpectedRevision, events: ProposedEvent[]): AppendOutcome {
    const existing = this.streams.get(stream) ?? [];
    const current = existing.length === 0 ? undefined : BigInt(existing.length - 1);
    const repeat = this.recognisedRepeat(existing, expected, events);
    if (repeat) return repeat;
    const matches =
      expected.kind === 'any' ||
      (expected.kind === 'no_stream' && current === undefined) ||
      (expected.kind === 'stream_exists' && current !== undefined) ||
      (expected.kind === 'revision' && current === expected.revision);
    if (!matches) return { kind: 'wrong_expected_version', currentRevision: current };
    if (events.length === 0) {
      // An empty write succeeds without a position (Streams.Append.cs: `NoPosition` when nothing was written).
      return { kind: 'written', currentRevision: current ?? -1n, position: this.end };
    }

    // Every event of a write is a self-committed prepare record (PrepareFlags.IsCommitted,
    // StorageWriterService.cs), so its `$all` position is its own log position as both commit and
    // prepare (Data/ResolvedEvent.cs, CalculatePosition; AllReader.cs).
    const created = ticksNow();
    const stored = events.map<StoredEvent>((event, index) => {
      const at = this.writerCheckpoint;
      this.writerCheckpoint += recordSize(stream, event);
      return { ...event, stream, revision: BigInt(existing.length + index), created, position: { commit: at, prepare: at } };
    });
    this.streams.set(stream, [...existing, ...stored]);
    this.all.push(...stored);
    for (const listener of this.listeners) listener();
    // The answer is the last event's position, as both commit and prepare (WriteEvents.cs passes
    // CommitPosition twice; StorageChaser.cs commits at the last prepare's LogPosition).
    const last = stored[stored.length - 1]!;
    return { kind: 'written', currentRevision: last.revision, position: last.position };
  }

  /**
   * Events of `$all` from `from`, inclusive (AllReader.cs: an event is read forwards when its
   * position >= the position asked for). `$epoch-information` is never shown in `$all`
   * (ReaderIndex/EventFilter.cs, DefaultAllFilter).
   */
  *readAllForwards(from: Position): Generator<StoredEvent> {
    for (let index = this.firstIndexAtOrAfter(from); index < this.all.length; index++) {
      if (!hiddenFromAll(this.all[index]!)) yield this.all[index]!;
    }
  }

  /** Events of `$all` before `before`, exclusive (AllReader.cs, the backwards case), newest first. */
  *readAllBackwards(before: Position): Generator<StoredEvent> {
    for (let index = this.firstIndexAtOrAfter(before) - 1; index >= 0; index--) {
      if (!hiddenFromAll(this.all[index]!)) yield this.all[index]!;
    }
  }

  /** Whether `position` is the position of a record, the start, or the end: anything else is not a valid read position. */
  isValidPosition(position: Position): boolean {
    if (position.commit === this.writerCheckpoint && position.prepare === this.writerCheckpoint) return true;
    if (position.commit === 0n && position.prepare === 0n) return true;
    const at = this.all[this.firstIndexAtOrAfter(position)];
    return at !== undefined && compare(at.position, position) === 0;
  }

  private firstIndexAtOrAfter(position: Position): number {
    let low = 0;
    let high = this.all.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (compare(this.all[middle]!.position, position) < 0) low = middle + 1;
      else high = middle;
    }
    return low;
  }

  private recognisedRepeat(existing: StoredEvent[], expected: ExpectedRevision, events: ProposedEvent[]): AppendOutcome | undefined {
    if (events.length === 0) return undefined;
    let start: number;
    if (expected.kind === 'revision') start = Number(expected.revision) + 1;
    else if (expected.kind === 'no_stream') start = 0;
    else {
      // ANY / STREAM_EXISTS: the first event's id decides where a repeat would start.
      start = existing.findIndex((event) => event.id === events[0]!.id);
      if (start < 0) return undefined;
    }
    const stored = existing.slice(start, start + events.length);
    if (stored.length === 0) return undefined;
    const same = stored.length === events.length && stored.every((event, index) => event.id === events[index]!.id);
    if (!same) return undefined;
    // A recognised repeat answers with the original write's last event (IndexWriter.cs "Idempotent";
    // RequestManagerBase.cs ReturnCommitAt), not the stream's current end.
    const last = stored[stored.length - 1]!;
    return { kind: 'written', currentRevision: last.revision, position: last.position };
  }
}

const hiddenFromAll = (event: StoredEvent) => event.stream === '$epoch-information';

export function compare(a: Position, b: Position): number {
  if (a.commit !== b.commit) return a.commit < b.commit ? -1 : 1;
  if (a.prepare !== b.prepare) return a.prepare < b.prepare ? -1 : 1;
  return 0;
}
