import { readRecord, readRecordRange, type LoggedEvent } from '../eventstore/event-log.js';
import { emptyStreamHead, type EventStore, type StreamHead } from '../eventstore/port.js';
import type { Decider } from '../domain/deciders.js';
import type { DomainEvent, Envelope } from '../domain/events.js';
import type { Timestamp } from '../domain/timestamp.js';
import { chainHead, storedHashes } from '../integrity/hashes.js';
import { snapshotInterval, type RecordSnapshot, type SnapshotStore } from './snapshots.js';

/** A record's state and the stream head it reflects (what the next append expects). */
export type Loaded<State> = { state: State; head: StreamHead };

export type LoadOptions = {
  /** Where snapshots are kept; without, the record is folded from its first event. */
  snapshots?: SnapshotStore | undefined;
  /** The state as it was at this instant (`as_of`): events that occurred after it are not folded. */
  until?: Timestamp | undefined;
  /** The state as it was at this version: later events are not folded. */
  through?: bigint | undefined;
};

/**
 * Events read at once while folding: the first page a little more than a snapshot interval (what
 * a load after a snapshot reads), doubling from there up to the largest for a long fold.
 */
const firstPageSize = Number(snapshotInterval) + 28;
const largestPageSize = 4096;

/** A fold over a record's events; `version`, the event's place in the stream, is there for folds that number events (provenance). */
type Evolving<State, Event extends DomainEvent> = Pick<Decider<unknown, State, Event>, 'initialState'> & {
  evolve: (state: State, event: Envelope<Event>, version: bigint) => State;
};

/** A record's state folded up to a point of its stream: the version there, and the last of the service's events folded (or a snapshot's own). */
export type Folded<State> = { state: State; version: bigint; lastOwn: LoggedEvent | undefined };

/**
 * A record's state, from its latest snapshot (at or before `until`) and the events after it: the
 * cost of the events since that snapshot, not of the record's age. A snapshot whose event is no
 * longer the stream's is void, and the record is folded from its start. Every `snapshotInterval`
 * versions passed while folding is kept as a snapshot, so a missing one is made again by reading.
 * A record's own events occur strictly one after another (src/domain/command.ts), so the events at
 * or before `until` are the stream's first ones, and folding stops at the first after it (or the
 * first after version `through`); `version` is then the last event folded's.
 */
export async function foldRecord<State, Event extends DomainEvent>(
  store: EventStore,
  streamName: string,
  decider: Evolving<State, Event>,
  options: LoadOptions = {},
): Promise<Folded<State>> {
  const snapshot = await options.snapshots?.latest(streamName, options.until, options.through);
  const fromSnapshot = snapshot && (await foldFrom(store, streamName, decider, options, snapshot));
  return fromSnapshot ?? (await foldFrom(store, streamName, decider, options, undefined))!;
}

/** A record's state as foldRecord gives it, and the head the next append expects. */
export async function loadRecord<State, Event extends DomainEvent>(
  store: EventStore,
  streamName: string,
  decider: Evolving<State, Event>,
  options: LoadOptions = {},
): Promise<Loaded<State>> {
  const { state, version, lastOwn } = await foldRecord(store, streamName, decider, options);
  const head = headAfter(emptyStreamHead, lastOwn ? [lastOwn] : [], version) ?? {
    version,
    hash: chainHead((await readRecord(store, streamName)).events.map((logged) => logged.stored)),
  };
  return { state, head };
}

/** Folds the stream from `start` (or its first event); undefined when `start` is void. */
async function foldFrom<State, Event extends DomainEvent>(
  store: EventStore,
  streamName: string,
  decider: Evolving<State, Event>,
  { snapshots, until, through }: LoadOptions,
  start: RecordSnapshot | undefined,
): Promise<Folded<State> | undefined> {
  let state = start ? (start.state as State) : decider.initialState;
  let version = start?.head.version ?? 0n;
  // The last of the service's events read (a snapshot's own event first): its hash is the next append's `previous_hash`.
  let lastOwn: LoggedEvent | undefined;
  const made: RecordSnapshot[] = [];
  const keep = () => {
    // Not awaited and never rejecting (SnapshotStore.save): the read does not wait on derived data.
    if (snapshots && made.length > 0) void snapshots.save(made);
  };
  // From the snapshot's own event, to see that it is still there.
  for (let from = start?.head.version ?? 1n, pageSize = firstPageSize; ; pageSize = Math.min(pageSize * 2, largestPageSize)) {
    const page = await readRecordRange(store, streamName, { from, limit: pageSize });
    if (start && from === start.head.version && page.read[0]?.id !== start.eventId) return undefined;
    for (const logged of page.events) {
      const occurredAt = logged.event.metadata.occurred_at;
      const pastTheBound = (until !== undefined && occurredAt > until) || (through !== undefined && logged.version > through);
      if (logged.version > version && pastTheBound) {
        keep();
        // Stopped inside the page: the version is the last event folded's, not the page's end.
        return { state, version: lastOwn?.version ?? version, lastOwn };
      }
      lastOwn = logged;
      if (logged.version <= version) continue;
      state = decider.evolve(state, logged.event as Envelope<Event>, logged.version);
      if (logged.version % snapshotInterval === 0n)
        made.push({ streamName, head: { version: logged.version }, eventId: logged.id, occurredAt, state });
    }
    const last = page.read.at(-1);
    if (last && last.version > version) version = through !== undefined && last.version > through ? through : last.version;
    if (!last || page.read.length < pageSize || version === through) break;
    from = last.version + 1n;
  }
  keep();
  return { state, version, lastOwn };
}

/**
 * The stream's head at `version` after `head`, given the service's events read between (others'
 * events are not chained): the last one's stored hash. Undefined when that event was stored before
 * hashes existed, whose hash takes the whole chain to compute.
 */
export function headAfter(head: StreamHead, events: LoggedEvent[], version: bigint): StreamHead | undefined {
  const last = events.at(-1);
  if (!last) return { version, hash: head.hash };
  const hash = storedHashes(last.stored.metadata)?.hash;
  return hash === undefined ? undefined : { version, hash };
}
