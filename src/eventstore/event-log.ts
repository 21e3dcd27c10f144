import type { Logger } from 'pino';
import type { Envelope } from '../domain/events.js';
import { readStoredEvent, type ForeignReason } from '../domain/upcast.js';
import type { EventStore, GlobalPosition, RecordedEvent } from './port.js';

/**
 * The one reader of the log in domain terms: every consumer (command handling, the cascade, the
 * projector, the rebuild, verify, history) reads through here, so each stored event is upcast to
 * the current schema in one place. The port's reads already hold only the service's streams
 * (src/eventstore/port.ts); events another program wrote into them are left out here, and
 * reported once each to whoever `reportForeignEvents` names for the store.
 */

/** A domain event and where it sits: its stream, its 1-based version there, and its global position. */
export type LoggedEvent = { event: Envelope; streamName: string; version: bigint; position: GlobalPosition };

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
        position: `${event.position.commit}:${event.position.prepare}`,
        reason: event.reason,
      },
      'left out an event another program wrote into a service stream',
    );
  };
}

/** The service's own events among `recorded`, in order; foreign ones are reported and left out, an unreadable one throws. */
function ownEvents(store: EventStore, recorded: RecordedEvent[]): LoggedEvent[] {
  const events: LoggedEvent[] = [];
  for (const stored of recorded) {
    const reading = readStoredEvent(stored);
    if (reading.kind === 'unreadable') throw new UnreadableEvent(addressOf(stored), reading.reason);
    if (reading.kind === 'foreign') foreignReporters.get(store)?.({ ...addressOf(stored), reason: reading.reason });
    else events.push({ event: reading.envelope, streamName: stored.streamName, version: stored.version, position: stored.position });
  }
  return events;
}

/**
 * One record's events, oldest first (a record that never existed has none), and the stream's
 * version: the number of events it holds, foreign ones included, which is what an append expects.
 */
export async function readRecord(store: EventStore, streamName: string): Promise<{ events: LoggedEvent[]; version: bigint }> {
  const recorded = await store.readStream(streamName);
  return { events: ownEvents(store, recorded), version: recorded[recorded.length - 1]?.version ?? 0n };
}

/**
 * The service's events among the next `limit` after `after` in global order. `end` is the
 * position of the last one read, foreign ones included (undefined when there was none), and
 * `read` how many were read: a page may hold fewer events than it covers.
 */
export async function readPage(
  store: EventStore,
  after: GlobalPosition,
  limit: number,
): Promise<{ events: LoggedEvent[]; end: GlobalPosition | undefined; read: number }> {
  const page = await store.readAll(after, limit);
  return { events: ownEvents(store, page), end: page[page.length - 1]?.position, read: page.length };
}

/** Every event after `after`, page by page, to the end of the log as it is while walking. */
export async function* walkLog(store: EventStore, after: GlobalPosition, pageSize: number): AsyncGenerator<LoggedEvent[]> {
  for (let from = after; ;) {
    const { events, end } = await readPage(store, from, pageSize);
    if (!end) return;
    yield events;
    from = end;
  }
}
