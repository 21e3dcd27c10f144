import { notFound } from '../../errors.js';
import { readRecord, readRecordRange, type LoggedEvent } from '../../eventstore/event-log.js';
import type { EventStore } from '../../eventstore/port.js';
import { solutionStream, workspaceStream } from '../../eventstore/stream-names.js';
import type { Page, PageRequest } from '../../read/pages.js';
import { solutionDecider, workspaceDecider } from '../../domain/deciders.js';
import { chainHashes, storedHashes } from '../../integrity/hashes.js';
import type { Envelope } from '../../domain/events.js';
import type { Solution } from '../../domain/solution.js';
import type { Timestamp } from '../../domain/timestamp.js';
import type { Workspace } from '../../domain/workspace.js';
import { foldRecord } from '../../write/load-record.js';
import type { SnapshotStore } from '../../write/snapshots.js';
import { historyItem, type EventOf, type HistoryItem, type RecordKind } from '../history.js';

/**
 * Audit reads (contract §12), straight from the event log through the port, so they work on
 * either store and show what was recorded, not a reconstruction.
 */

const streamOf = (kind: RecordKind, id: string) => (kind === 'workspace' ? workspaceStream(id) : solutionStream(id));

/** The record's events as logged; empty when it never existed or belongs to an organization not given. */
async function accessibleRecord(
  store: EventStore,
  kind: RecordKind,
  id: string,
  organizations: ReadonlySet<string>,
): Promise<LoggedEvent[]> {
  const events = (await readRecord(store, streamOf(kind, id))).events;
  const organizationId = organizationOf(events[0]?.event);
  return organizationId !== undefined && organizations.has(organizationId) ? events : [];
}

/** The organization a record belongs to, from its creating event; undefined when that is not one of the service's creations. */
function organizationOf(created: Envelope | undefined): string | undefined {
  return created && 'organization_id' in created.data ? created.data.organization_id : undefined;
}

/**
 * One page of a record's history, reading only what it shows: the creating event (whose
 * organization decides access), the stream's last event (the total) and the page's range of
 * versions, each O(1) or O(page) in the record's age. A stream into which another program wrote
 * (foreign events, left out) is paged by its own events only, which takes reading it whole: when
 * any of the three reads meets a foreign event, the page is taken from the whole stream instead.
 */
export async function recordHistory<K extends RecordKind>(
  store: EventStore,
  kind: K,
  id: string,
  organizations: ReadonlySet<string>,
  request: PageRequest,
): Promise<Page<HistoryItem<EventOf<K>>>> {
  const streamName = streamOf(kind, id);
  const start = (request.page - 1) * request.size;
  const [first, last, page] = await Promise.all([
    readRecordRange(store, streamName, { limit: 1 }),
    readRecordRange(store, streamName, { direction: 'backwards', limit: 1 }),
    readRecordRange(store, streamName, { from: BigInt(start + 1), limit: request.size }),
  ]);
  if (first.leftOut + last.leftOut + page.leftOut > 0) return wholeHistory(store, kind, id, organizations, request);
  // An event stored before hashes existed has them computed along the chain from the start.
  const hashes = page.events.map((logged) => storedHashes(logged.stored.metadata));
  if (hashes.some((stored) => stored === undefined)) return wholeHistory(store, kind, id, organizations, request);
  const organizationId = organizationOf(first.events[0]?.event);
  if (organizationId === undefined || !organizations.has(organizationId)) throw notFound(kind);
  // The page may have been read after an append the last-event read missed.
  const total = Number([...last.read, ...page.read].reduce((most, event) => (event.version > most ? event.version : most), 0n));
  const items = page.events.map((logged, index) => historyItem<K>(logged.event, Number(logged.version), hashes[index]!));
  return { total, page: request.page, size: request.size, items };
}

/** The history page out of the whole stream, paging the service's own events only; each keeps its version in the stream. */
async function wholeHistory<K extends RecordKind>(
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
  const items = logged
    .slice(start, start + request.size)
    .map(({ event, version }, index) => historyItem<K>(event, Number(version), hashes[start + index]!));
  return { total: logged.length, page: request.page, size: request.size, items };
}

/** The workspace as it was at `asOf`, from the latest snapshot at or before it; 404 if it did not exist then. */
export async function workspaceAsOf(
  store: EventStore,
  id: string,
  organizations: ReadonlySet<string>,
  asOf: Timestamp,
  snapshots?: SnapshotStore,
): Promise<Workspace> {
  const { state } = await foldRecord(store, workspaceStream(id), workspaceDecider, { snapshots, until: asOf });
  if (state.status !== 'active' || !organizations.has(state.workspace.organization_id)) throw notFound('workspace');
  return state.workspace;
}

/** The solution as it was at `asOf`: it existed then, and so did its workspace (a cascade can trail the deletion). */
export async function solutionAsOf(
  store: EventStore,
  id: string,
  organizations: ReadonlySet<string>,
  asOf: Timestamp,
  snapshots?: SnapshotStore,
): Promise<Solution> {
  const { state } = await foldRecord(store, solutionStream(id), solutionDecider, { snapshots, until: asOf });
  if (state.status !== 'active' || !organizations.has(state.solution.organization_id)) throw notFound('solution');
  const workspace = await foldRecord(store, workspaceStream(state.solution.workspace_id), workspaceDecider, { snapshots, until: asOf });
  if (workspace.state.status !== 'active') throw notFound('solution');
  return state.solution;
}
