import type { Histogram } from 'prom-client';
import { inChildSpan } from '../observability/tracing.js';
import {
  StreamVersionConflict,
  type AppendResult,
  type EventStore,
  type GlobalPosition,
  type NewEvent,
  type RecordedEvent,
  type StreamOrderedLog,
  type StreamRange,
} from './port.js';

type CallName = 'append' | 'read_stream' | 'read_all' | 'read_log_by_stream' | 'read_last_position' | 'ping';

/**
 * The event store port with each call timed (by call and outcome) and traced as a child span of
 * the request it serves. Applied once where the service is composed, so both adapters get it.
 * `waitForEvents` is a wait, not a call, and `estimateEventsBetween` reads nothing: neither is timed
 * nor traced.
 */
export class InstrumentedEventStore implements EventStore {
  /** Present when the wrapped store has it (the PostgreSQL store). */
  readonly readLogByStream?: <T>(consume: (log: StreamOrderedLog) => Promise<T>) => Promise<T>;

  constructor(
    private readonly store: EventStore,
    private readonly duration: Histogram<'call' | 'outcome'>,
  ) {
    const readLogByStream = store.readLogByStream?.bind(store);
    if (readLogByStream) {
      this.readLogByStream = (consume) => this.observe('read_log_by_stream', {}, () => readLogByStream(consume));
    }
  }

  append(streamName: string, expectedVersion: bigint, events: NewEvent[]): Promise<AppendResult> {
    return this.observe('append', { 'wsapi.stream': streamName, 'wsapi.event_count': events.length }, () =>
      this.store.append(streamName, expectedVersion, events),
    );
  }

  readStream(streamName: string, range?: StreamRange): Promise<RecordedEvent[]> {
    return this.observe('read_stream', { 'wsapi.stream': streamName }, () => this.store.readStream(streamName, range));
  }

  readAll(after: GlobalPosition, limit: number): Promise<RecordedEvent[]> {
    return this.observe('read_all', { 'wsapi.limit': limit }, () => this.store.readAll(after, limit));
  }

  readLastPosition(): Promise<GlobalPosition | undefined> {
    return this.observe('read_last_position', {}, () => this.store.readLastPosition());
  }

  estimateEventsBetween(from: GlobalPosition, to: GlobalPosition): number {
    return this.store.estimateEventsBetween(from, to);
  }

  waitForEvents(after: GlobalPosition, timeoutMs: number, signal: AbortSignal): Promise<void> {
    return this.store.waitForEvents(after, timeoutMs, signal);
  }

  ping(): Promise<void> {
    return this.observe('ping', {}, () => this.store.ping());
  }

  close(): Promise<void> {
    return this.store.close();
  }

  private async observe<T>(call: CallName, attributes: Record<string, string | number>, work: () => Promise<T>): Promise<T> {
    const stop = this.duration.startTimer({ call });
    try {
      const result = await inChildSpan(`event_store ${call}`, attributes, work);
      stop({ outcome: 'ok' });
      return result;
    } catch (error) {
      stop({ outcome: error instanceof StreamVersionConflict ? 'conflict' : 'error' });
      throw error;
    }
  }
}
