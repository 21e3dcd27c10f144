import type { DomainEvent, Envelope, SolutionEvent, WorkspaceEvent } from '../domain/events.js';
import type { Timestamp } from '../domain/timestamp.js';
import type { EventHashes } from '../integrity/hashes.js';

/**
 * A record's history as the audit reads show it (contract §12): its items, one per event as
 * recorded. The reads themselves, from the event log through the port, are in
 * adapters/history-reads.ts.
 */

/** One event as the history shows it; a union over event types, so `type` tells what `data` holds. */
export type HistoryItem<E extends DomainEvent = DomainEvent> = E extends DomainEvent
  ? { version: number; type: E['type']; occurred_at: Timestamp; actor: string; data: E['data'] } & EventHashes
  : never;

export type RecordKind = 'workspace' | 'solution';
export type EventOf<K extends RecordKind> = K extends 'workspace' ? WorkspaceEvent : SolutionEvent;

/** One event as a history item; `version` is its 1-based place in the record's stream (contract §12), another program's events counted. */
export const historyItem = <K extends RecordKind>(event: Envelope, version: number, { data_hash, previous_hash, hash }: EventHashes) =>
  // A record's stream holds only its own kind's events (stream-names.ts), so the cast only narrows.
  ({
    version,
    type: event.type,
    occurred_at: event.metadata.occurred_at,
    actor: event.metadata.actor,
    data: event.data,
    hash,
    previous_hash,
    data_hash,
  }) as HistoryItem<EventOf<K>>;
