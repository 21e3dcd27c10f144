import type { Logger } from 'pino';
import type { Envelope } from '../domain/events.js';
import { readStoredEvent, type ForeignReason } from '../domain/upcast.js';
import { encodePosition, type EventStore, type GlobalPosition, type RecordedEvent, type StreamRange } from './port.js';

/**
 * The one reader of the log in domain terms: every consumer (command handling, the cascade, the
 * projector, the rebuild, verify, history) reads through here, so each stored event is upcast to
 * the current schema in one place. The port's reads already hold only the service's streams
 * (src/eventstore/port.ts); events another program wrote into them are left out here, and
 * reported once each to whoever `reportForeignEvents` names for the store.
 */

/**
 * A domain event and where it sits: its stream, its 1-based version there, and its global position;
 * `stored` is the event as stored, before upcasting, which its hashes cover (src/integrity/hashes.ts).
 */
export type LoggedEvent = {
  event: Envelope;
  id: string;
  streamName: string;
  version: bigint;
  position: GlobalPosition;
  stored: RecordedEvent;
};

/** Where an event sits in the log and what it claims to be, for log lines, errors and the dead-letter table. */
export type EventAddress = { id: string; streamName: string; version: bigint; type: string; position: GlobalPosition };

/** An event in a service stream that another program wrote: left out of every read. */
export type ForeignEvent = EventAddress & { reason: ForeignReason };

/** One of the service's own events that this version cannot read (a newer version's, or a broken payload). */
export class UnreadableEvent extends Error {
  constructor(
    readonly event: EventAddress,
    readonly reason: string,
  ) {
    super(`${event.streamName} version ${event.version} (${event.type}) cannot be read: ${reason}`);
    this.name = 'UnreadableEvent';
  }
}

const addressOf = (recorded: RecordedEvent): EventAddress => ({
  id: recorded.id,
  streamName: recorded.streamName,
  version: recorded.version,
  type: recorded.type,
  position: recorded.position,
});

const foreignReporters = new WeakMap<EventStore, (event: ForeignEvent) => void>();

/** Names who hears of the foreign events found in `store`'s reads (the log, a metric); without one they are left out silently. */
export function reportForeignEvents(store: EventStore, report: (event: ForeignEvent) => void): void {
  foreignReporters.set(store, report);
}

/** Distinct foreign events a reporter remembers, so that each is logged and counted once however often it is read. */
const rememberedForeignEvents = 10_000;

/**
 * Logs each foreign event once, with its position, and tells `count`. Past `rememberedForeignEvents`
 * distinct ones it says so once and stops logging each: a store full of another program's events
 * must not flood the log or hold memory.
 */
export function foreignEventLog(logger: Logger, count: (reason: ForeignReason) => void = () => undefined): (event: ForeignEvent) => void {
  const seen = new Set<string>();
  let saturated = false;
  return (event) => {
    const key = `${event.streamName}@${event.version}`;
    if (seen.has(key)) return;
    if (seen.size >= rememberedForeignEvents) {
      if (!saturated)
        logger.warn({ remembered: rememberedForeignEvents }, 'many foreign events in service streams; no longer logging each');
      saturated = true;
      return;
    }
    seen.add(key);
    count(event.reason);
    logger.warn(
      {
        stream: event.streamName,
        version: event.version.toString(),
        type: event.type,
        eventId: event.id,
        position: encodePosition(event.position),
        reason: event.reason,
      },
      'left out an event another program wrote into a service stream',
    );
  };
}

/** Events an operator skipped (src/projections/dead-letters.ts), left out like foreign ones. */
export type SkippedEvents = (position: GlobalPosition) => boolean;

const noneSkipped: SkippedEvents = () => false;

/**
 * One stored event as the service's readers take it: one of its own (a LoggedEvent); undefined
 * when it is left out (another program's, reported, or one this version cannot read that an
 * operator skipped); or the UnreadableEvent that stops whoever reads it.
 */
export function readLoggedEvent(
  store: EventStore,
  stored: RecordedEvent,
  skipped: SkippedEvents,
): LoggedEvent | UnreadableEvent | undefined {
  const reading = readStoredEvent(stored);
  if (reading.kind === 'unreadable') return skipped(stored.position) ? undefined : new UnreadableEvent(addressOf(stored), reading.reason);
  if (reading.kind === 'foreign') {
    foreignReporters.get(store)?.({ ...addressOf(stored), reason: reading.reason });
    return undefined;
  }
  return {
    event: reading.envelope,
    id: stored.id,
    streamName: stored.streamName,
    version: stored.version,
    position: stored.position,
    stored,
  };
}

/**
 * The service's own events among `recorded`, in order, up to the first one this version cannot
 * read (unless skipped), which ends them; foreign ones are reported and left out.
 */
function ownEvents(
  store: EventStore,
  recorded: RecordedEvent[],
  skipped: SkippedEvents,
): { events: LoggedEvent[]; readUpTo: number; unreadable?: UnreadableEvent } {
  const events: LoggedEvent[] = [];
  for (const [index, stored] of recorded.entries()) {
    const logged = readLoggedEvent(store, stored, skipped);
    if (logged instanceof UnreadableEvent) return { events, readUpTo: index, unreadable: logged };
    if (logged) events.push(logged);
  }
  return { events, readUpTo: recorded.length };
}

/**
 * One record's events, oldest first (a record that never existed has none), and the stream's
 * version: the number of events it holds, foreign ones included, which is what an append expects.
 */
export async function readRecord(store: EventStore, streamName: string): Promise<{ events: LoggedEvent[]; version: bigint }> {
  const recorded = await store.readStream(streamName);
  // A record with an event this version cannot read is not decided on, nor shown in part.
  const { events, unreadable } = ownEvents(store, recorded, noneSkipped);
  if (unreadable) throw unreadable;
  return { events, version: recorded[recorded.length - 1]?.version ?? 0n };
}

/**
 * The service's events among a range of one stream's (src/eventstore/port.ts, StreamRange), in
 * the read's order; `leftOut` counts the foreign ones among them, left out. Throws on an event
 * this version cannot read, as readRecord does.
 */
export async function readRecordRange(
  store: EventStore,
  streamName: string,
  range: StreamRange,
): Promise<{ events: LoggedEvent[]; read: RecordedEvent[]; leftOut: number }> {
  const recorded = await store.readStream(streamName, range);
  const { events, unreadable } = ownEvents(store, recorded, noneSkipped);
  if (unreadable) throw unreadable;
  return { events, read: recorded, leftOut: recorded.length - events.length };
}

export type Page = {
  events: LoggedEvent[];
  /** The position of the last event the page covers, foreign and skipped ones included; undefined when it covers none. */
  end: GlobalPosition | undefined;
  /** How many events the page covers: it may hold fewer than that. */
  read: number;
  /** The event of the service's own the page stops before, because this version cannot read it (and nobody skipped it). */
  unreadable?: UnreadableEvent;
};

/**
 * The service's events among the next `limit` after `after` in global order, up to the first one
 * this version cannot read, which ends the page (`unreadable`) unless `skipped` says an operator
 * skipped it.
 */
export async function readPage(store: EventStore, after: GlobalPosition, limit: number, skipped = noneSkipped): Promise<Page> {
  const recorded = await store.readAll(after, limit);
  const { events, readUpTo, unreadable } = ownEvents(store, recorded, skipped);
  return { events, end: recorded[readUpTo - 1]?.position, read: readUpTo, ...(unreadable ? { unreadable } : {}) };
}

/**
 * Every event after `after`, page by page, to the end of the log as it is while walking, or to
 * the first event this version cannot read that nobody skipped: the projector stops there too.
 */
export async function* walkLog(
  store: EventStore,
  after: GlobalPosition,
  pageSize: number,
  skipped = noneSkipped,
): AsyncGenerator<LoggedEvent[]> {
  for (let from = after; ;) {
    const { events, end, unreadable } = await readPage(store, from, pageSize, skipped);
    if (end) yield events;
    if (!end || unreadable) return;
    from = end;
  }
}
