import { notFound } from '../errors.js';
import type { EventStore } from '../eventstore/port.js';
import { solutionStream, workspaceStream } from '../eventstore/stream-names.js';
import type { Page, PageRequest } from '../read/pages.js';
import { solutionDecider, workspaceDecider } from '../write/deciders.js';
import type { Envelope } from '../write/events.js';
import type { Solution } from '../write/solution.js';
import type { Timestamp } from '../write/timestamp.js';
import { upcast } from '../write/upcast.js';
import type { Workspace } from '../write/workspace.js';

/**
 * Audit reads (contract §12), straight from the event log through the port, so they work on
 * either store and show what was recorded, not a reconstruction.
 */

export type HistoryItem = {
  version: number;
  type: string;
  occurred_at: Timestamp;
  actor: string;
  data: unknown;
};

export type RecordKind = 'workspace' | 'solution';

const streamOf = (kind: RecordKind, id: string) => (kind === 'workspace' ? workspaceStream(id) : solutionStream(id));

/** The record's events, upcast; empty when it never existed or belongs to an organization not given. */
async function accessibleEvents(store: EventStore, kind: RecordKind, id: string, organizations: ReadonlySet<string>): Promise<Envelope[]> {
  const events = (await store.readStream(streamOf(kind, id))).map(upcast);
  const created = events[0];
  const organizationId = created && 'organization_id' in created.data ? created.data.organization_id : undefined;
  return organizationId !== undefined && organizations.has(organizationId) ? events : [];
}

export async function recordHistory(
  store: EventStore,
  kind: RecordKind,
  id: string,
  organizations: ReadonlySet<string>,
  request: PageRequest,
): Promise<Page<HistoryItem>> {
  const events = await accessibleEvents(store, kind, id, organizations);
  if (events.length === 0) throw notFound(kind);
  const start = (request.page - 1) * request.size;
  const items = events.slice(start, start + request.size).map((event, index) => ({
    version: start + index + 1,
    type: event.type,
    occurred_at: event.metadata.occurred_at,
    actor: event.metadata.actor,
    data: event.data,
  }));
  return { total: events.length, page: request.page, size: request.size, items };
}

/** The workspace as it was at `asOf`, folded with the write side's own evolve; 404 if it did not exist then. */
export async function workspaceAsOf(store: EventStore, id: string, organizations: ReadonlySet<string>, asOf: Timestamp): Promise<Workspace> {
  const events = await accessibleEvents(store, 'workspace', id, organizations);
  const state = events
    .filter((event) => event.metadata.occurred_at <= asOf)
    .reduce((current, event) => workspaceDecider.evolve(current, event as never), workspaceDecider.initialState);
  if (state.status !== 'active') throw notFound('workspace');
  return state.workspace;
}

export async function solutionAsOf(store: EventStore, id: string, organizations: ReadonlySet<string>, asOf: Timestamp): Promise<Solution> {
  const events = await accessibleEvents(store, 'solution', id, organizations);
  const state = events
    .filter((event) => event.metadata.occurred_at <= asOf)
    .reduce((current, event) => solutionDecider.evolve(current, event as never), solutionDecider.initialState);
  if (state.status !== 'active') throw notFound('solution');
  return state.solution;
}
