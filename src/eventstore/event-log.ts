import type { Envelope } from '../domain/events.js';
import { upcast } from '../domain/upcast.js';
import type { EventStore, GlobalPosition, RecordedEvent } from './port.js';

/**
 * The one reader of the log in domain terms: every consumer (command handling, the cascade, the
 * projector, the rebuild, verify, history) reads through here, so each stored event is upcast to
 * the current schema in one place. The port's reads already hold only the service's streams
 * (src/eventstore/port.ts).
 */

/** A domain event and where it sits: its stream, its 1-based version there, and its global position. */
export type LoggedEvent = { event: Envelope; streamName: string; version: bigint; position: GlobalPosition };

const logged = (recorded: RecordedEvent): LoggedEvent => ({
  event: upcast(recorded),
  streamName: recorded.streamName,
  version: recorded.version,
  position: recorded.position,
});

/** One record's events, oldest first; a record that never existed has none. */
export async function readRecord(store: EventStore, streamName: string): Promise<LoggedEvent[]> {
  return (await store.readStream(streamName)).map(logged);
}

/** The next events after `after` in global order, at most `limit`; `end` is the last one's position. */
export async function readPage(
  store: EventStore,
  after: GlobalPosition,
  limit: number,
): Promise<{ events: LoggedEvent[]; end: GlobalPosition | undefined }> {
  const page = await store.readAll(after, limit);
  return {
    events: page.map(logged),
    end: page[page.length - 1]?.position,
  };
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
