import { notFound } from '../errors.js';
import { readRecord, type LoggedEvent } from '../eventstore/event-log.js';
import type { EventStore } from '../eventstore/port.js';
import { solutionStream, workspaceStream } from '../eventstore/stream-names.js';
import type { Page, PageRequest } from '../read/pages.js';
import { solutionDecider, workspaceDecider } from '../domain/deciders.js';
import { chainHashes, type EventHashes } from '../integrity/hashes.js';
import type { DomainEvent, Envelope, SolutionEvent, WorkspaceEvent } from '../domain/events.js';
import type { Solution } from '../domain/solution.js';
import type { Timestamp } from '../domain/timestamp.js';
import type { Workspace } from '../domain/workspace.js';

/**
 * Audit reads (contract §12), straight from the event log through the port, so they work on
 * either store and show what was recorded, not a reconstruction.
 */

/** One event as the history shows it; a union over event types, so `type` tells what `data` holds. */
export type HistoryItem<E extends DomainEvent = DomainEvent> = E extends DomainEvent
  ? { version: number; type: E['type']; occurred_at: Timestamp; actor: string; data: E['data'] } & EventHashes
  : never;

export type RecordKind = 'workspace' | 'solution';
export type EventOf<K extends RecordKind> = K extends 'workspace' ? WorkspaceEvent : SolutionEvent;

const streamOf = (kind: RecordKind, id: string) => (kind === 'workspace' ? workspaceStream(id) : solutionStream(id));

/** The record's events, upcast; empty when it never existed or belongs to an organization not given. */
async function accessibleEvents(store: EventStore, kind: RecordKind, id: string, organizations: ReadonlySet<string>): Promise<Envelope[]> {
  return (await accessibleRecord(store, kind, id, organizations)).map((logged) => logged.event);
}

/** The record's events as logged; empty when it never existed or belongs to an organization not given. */
export async function accessibleRecord(
  store: EventStore,
  kind: RecordKind,
  id: string,
  organizations: ReadonlySet<string>,
): Promise<LoggedEvent[]> {
  const events = (await readRecord(store, streamOf(kind, id))).events;
  const created = events[0]?.event;
  const organizationId = created && 'organization_id' in created.data ? created.data.organization_id : undefined;
  return organizationId !== undefined && organizations.has(organizationId) ? events : [];
}

export async function recordHistory<K extends RecordKind>(
  store: EventStore,
  kind: K,
  id: string,
  organizations: ReadonlySet<string>,
  request: PageRequest,
): Promise<Page<HistoryItem<EventOf<K>>>> {
  const logged = await accessibleRecord(store, kind, id, organizations);
  if (logged.length === 0) throw notFound(kind);
  const hashes = chainHashes(logged.map((entry) => entry.stored));
  const start = (request.page - 1) * request.size;
  // A record's stream holds only its own kind's events (stream-names.ts), so the cast only narrows.
  const items = logged.slice(start, start + request.size).map(({ event }, index) => {
    const { data_hash, previous_hash, hash } = hashes[start + index]!;
    return {
      version: start + index + 1,
      type: event.type,
      occurred_at: event.metadata.occurred_at,
      actor: event.metadata.actor,
      data: event.data,
      hash,
      previous_hash,
      data_hash,
    } as HistoryItem<EventOf<K>>;
  });
  return { total: logged.length, page: request.page, size: request.size, items };
}

/** A record's state at `asOf`, folded with the write side's own evolve from the events up to then. */
function stateAt<State>(
  events: Envelope[],
  asOf: Timestamp,
  decider: { initialState: State; evolve: (state: State, event: never) => State },
): State {
  return events
    .filter((event) => event.metadata.occurred_at <= asOf)
    .reduce((current, event) => decider.evolve(current, event as never), decider.initialState);
}

/** The workspace as it was at `asOf`; 404 if it did not exist then. */
export async function workspaceAsOf(
  store: EventStore,
  id: string,
  organizations: ReadonlySet<string>,
  asOf: Timestamp,
): Promise<Workspace> {
  const state = stateAt(await accessibleEvents(store, 'workspace', id, organizations), asOf, workspaceDecider);
  if (state.status !== 'active') throw notFound('workspace');
  return state.workspace;
}

/** The solution as it was at `asOf`: it existed then, and so did its workspace (a cascade can trail the deletion). */
export async function solutionAsOf(store: EventStore, id: string, organizations: ReadonlySet<string>, asOf: Timestamp): Promise<Solution> {
  const state = stateAt(await accessibleEvents(store, 'solution', id, organizations), asOf, solutionDecider);
  if (state.status !== 'active') throw notFound('solution');
  const workspaceEvents = (await readRecord(store, workspaceStream(state.solution.workspace_id))).events.map((logged) => logged.event);
  if (stateAt(workspaceEvents, asOf, workspaceDecider).status !== 'active') throw notFound('solution');
  return state.solution;
}
