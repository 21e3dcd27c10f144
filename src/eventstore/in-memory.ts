import {
  comparePositions,
  StreamVersionConflict,
  type AppendResult,
  type EventStore,
  type GlobalPosition,
  type NewEvent,
  type RecordedEvent,
  type StreamRange,
} from './port.js';

/**
 * The event store port in memory, for tests that need no database: the same contract as the
 * PostgreSQL and EventStoreDB adapters (test/int/event-store-contract.ts runs against all three),
 * kept in one process. Positions count events from 1, as both parts of the pair.
 */
export class InMemoryEventStore implements EventStore {
  private readonly log: RecordedEvent[] = [];
  private readonly streams = new Map<string, RecordedEvent[]>();
  private readonly waiters = new Set<() => void>();

  async append(streamName: string, expectedVersion: bigint, events: NewEvent[]): Promise<AppendResult> {
    const stream = this.streams.get(streamName) ?? [];
    if (BigInt(stream.length) !== expectedVersion) {
      // The same event ids already stored at that version: a retry of an append that succeeded.
      const earlier = stream.slice(Number(expectedVersion), Number(expectedVersion) + events.length);
      const repeated = earlier.length === events.length && earlier.every((event, index) => event.id === events[index]!.id);
      if (repeated && earlier.length > 0) return { version: expectedVersion + BigInt(events.length), position: earlier.at(-1)!.position };
      throw new StreamVersionConflict(streamName, expectedVersion);
    }
    const recorded = events.map((event, index): RecordedEvent => {
      const sequence = BigInt(this.log.length + index + 1);
      return { ...event, streamName, version: expectedVersion + BigInt(index + 1), position: { commit: sequence, prepare: sequence } };
    });
    this.streams.set(streamName, [...stream, ...recorded]);
    this.log.push(...recorded);
    for (const wake of [...this.waiters]) wake();
    return { version: expectedVersion + BigInt(events.length), position: recorded.at(-1)?.position ?? { commit: 0n, prepare: 0n } };
  }

  async readStream(streamName: string, range: StreamRange = {}): Promise<RecordedEvent[]> {
    const stream = this.streams.get(streamName) ?? [];
    const limit = range.limit ?? stream.length;
    if (range.direction === 'backwards') {
      const end = range.from === undefined ? stream.length : Math.min(Number(range.from), stream.length);
      return stream.slice(Math.max(0, end - limit), end).reverse();
    }
    const start = Math.max(0, Number(range.from ?? 1n) - 1);
    return stream.slice(start, start + limit);
  }

  async readAll(after: GlobalPosition, limit: number): Promise<RecordedEvent[]> {
    return this.log.filter((event) => comparePositions(event.position, after) > 0).slice(0, limit);
  }

  async readLastPosition(): Promise<GlobalPosition | undefined> {
    return this.log.at(-1)?.position;
  }

  estimateEventsBetween(from: GlobalPosition, to: GlobalPosition): number {
    return Math.max(0, Number(to.prepare - from.prepare));
  }

  waitForEvents(after: GlobalPosition, timeoutMs: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(check);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const check = () => {
        if (this.log.some((event) => comparePositions(event.position, after) > 0)) done();
      };
      const timer = setTimeout(done, timeoutMs);
      signal.addEventListener('abort', done);
      this.waiters.add(check);
      if (signal.aborted) done();
      else check();
    });
  }

  async ping(): Promise<void> {}

  async close(): Promise<void> {}
}
