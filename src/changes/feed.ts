import { assertNever } from '../domain/command.js';
import { solutionEventTypes, workspaceEventTypes, type DomainEvent, type Envelope } from '../domain/events.js';
import { comparePositions, type GlobalPosition } from '../eventstore/port.js';
import { encodeCursor } from './cursor.js';

/**
 * The change feed's pure part (contract §14): which row of the changes table each event makes,
 * which kinds a caller may read, and a row as the API shows it.
 */

export const changeTypes = [
  'WorkspaceCreated',
  'WorkspaceUpdated',
  'WorkspaceDeleted',
  'SolutionCreated',
  'SolutionUpdated',
  'SolutionDeleted',
] as const satisfies readonly DomainEvent['type'][];
export type ChangeType = (typeof changeTypes)[number];

/** An event of the log as the feed needs it (the log reader's LoggedEvent has these fields). */
export type FeedEvent = { event: Envelope; streamName: string; version: bigint; position: GlobalPosition };

/**
 * One row of the changes table. An update names neither its organization nor its workspace: the
 * row then leaves them out, and the table takes them from the record's first change (its creation).
 */
export type ChangeEntry = {
  commit_position: string;
  prepare_position: string;
  stream_name: string;
  version: string;
  type: ChangeType;
  record_id: string;
  organization_id: string | null;
  workspace_id: string | null;
  occurred_at: string;
  actor: string;
  data: DomainEvent['data'];
};

type RecordKeys = { organization_id: string; workspace_id: string };

function keysOf(event: Envelope): RecordKeys | null {
  switch (event.type) {
    case 'WorkspaceCreated':
    case 'WorkspaceDeleted':
      return { organization_id: event.data.organization_id, workspace_id: event.data.id };
    case 'SolutionCreated':
    case 'SolutionDeleted':
      return { organization_id: event.data.organization_id, workspace_id: event.data.workspace_id };
    case 'WorkspaceUpdated':
    case 'SolutionUpdated':
      return null;
    default:
      return assertNever(event);
  }
}

/**
 * The rows a batch of events (in log order) adds to the changes table. An update of a record
 * created in the same batch takes its keys from there; an older record's come from the table.
 */
export function changeEntriesOf(events: readonly FeedEvent[]): ChangeEntry[] {
  const keysOfStream = new Map<string, RecordKeys>();
  return events.map(({ event, streamName, version, position }) => {
    const own = keysOf(event);
    if (own) keysOfStream.set(streamName, own);
    const keys = own ?? keysOfStream.get(streamName) ?? null;
    return {
      commit_position: position.commit.toString(),
      prepare_position: position.prepare.toString(),
      stream_name: streamName,
      version: version.toString(),
      type: event.type,
      record_id: event.data.id,
      organization_id: keys?.organization_id ?? null,
      workspace_id: keys?.workspace_id ?? null,
      occurred_at: event.metadata.occurred_at,
      actor: event.metadata.actor,
      data: event.data,
    };
  });
}

/**
 * The kinds a caller reads: a workspace change needs `workspaces:read`, a solution change
 * `solutions:read`; kinds it cannot read are left out, not refused. Narrowed by the `types` filter.
 */
export function readableTypes(scopes: ReadonlySet<string>, filter: readonly ChangeType[] | undefined): ChangeType[] {
  const readable = (type: ChangeType) =>
    (workspaceEventTypes.has(type) && scopes.has('workspaces:read')) || (solutionEventTypes.has(type) && scopes.has('solutions:read'));
  // Each once: a repeated type reads nothing more, and the list is told from all types by its length.
  return [...new Set(filter ?? changeTypes)].filter(readable);
}

/** A change as `list_changes` and the stream show it (contract §14). */
export type Change = {
  id: string;
  type: ChangeType;
  occurred_at: string;
  actor: string;
  organization_id: string;
  workspace_id: string;
  solution_id?: string;
  version: number;
  data: DomainEvent['data'];
};

/** A row read back from the changes table. */
export type StoredChange = {
  commit_position: string;
  prepare_position: string;
  type: ChangeType;
  record_id: string;
  organization_id: string;
  workspace_id: string;
  version: string;
  occurred_at: string;
  actor: string;
  data: DomainEvent['data'];
};

const positionOf = (row: Pick<StoredChange, 'commit_position' | 'prepare_position'>): GlobalPosition => ({
  commit: BigInt(row.commit_position),
  prepare: BigInt(row.prepare_position),
});

export function changeOf(row: StoredChange): Change {
  return {
    id: encodeCursor(positionOf(row)),
    type: row.type,
    occurred_at: row.occurred_at,
    actor: row.actor,
    organization_id: row.organization_id,
    workspace_id: row.workspace_id,
    ...(solutionEventTypes.has(row.type) ? { solution_id: row.record_id } : {}),
    version: Number(row.version),
    data: row.data,
  };
}

/** What a caller asks of the feed, validated. */
export type ChangeQuery = {
  organizations: readonly string[];
  workspaceId: string | undefined;
  types: readonly ChangeType[];
  after: GlobalPosition;
  limit: number;
};

export type ChangePage = { items: Change[]; next: string; has_more: boolean };

/** Rows read for a page; `through`, when known, a position up to which every change the query could show was considered. */
export type PageRows = { rows: readonly StoredChange[]; more: boolean; through?: GlobalPosition | undefined };

/** Where the page's `next` continues from: after the last row shown, or the cursor given, or `through` when further. */
export function continuesFrom(read: PageRows, query: Pick<ChangeQuery, 'after'>): GlobalPosition {
  const last = read.rows.at(-1);
  const shown = last ? positionOf(last) : query.after;
  return read.through && comparePositions(read.through, shown) > 0 ? read.through : shown;
}

/**
 * A page from the rows read: `next` continues from where they leave off (continuesFrom).
 * `present` shows a row (a reader sharing rows among callers shares their Changes too).
 */
export function pageOf(read: PageRows, query: Pick<ChangeQuery, 'after'>, present: (row: StoredChange) => Change = changeOf): ChangePage {
  return {
    items: read.rows.map(present),
    next: encodeCursor(continuesFrom(read, query)),
    has_more: read.more,
  };
}
