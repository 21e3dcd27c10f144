import {
  currentSchemaVersion,
  solutionEventTypes,
  workspaceEventTypes,
  type DomainEvent,
  type Envelope,
  type EventMetadata,
} from './events.js';

/**
 * Every stored event is read through here. Events are stored with the schema version they were
 * written with; an upcaster per (type, version) lifts old shapes to the current one, so the write
 * side, the projections and the history all see one shape.
 */
type Upcaster = (data: Record<string, unknown>) => Record<string, unknown>;

/** upcasters[type][v] lifts `data` from schema version v to v + 1. */
const upcasters: Record<string, Record<number, Upcaster>> = {
  SolutionDeleted: { 1: (data) => ({ ...data, reason: 'requested' }) },
};

/** What the domain reads of a stored event; the event store's RecordedEvent has this and more (stream, position). */
export type StoredEvent = { type: string; data: unknown; metadata: unknown };

/** Why an event in a service stream is not the service's: another program wrote it there. */
export type ForeignReason = 'no_metadata' | 'foreign_metadata';

/**
 * What a stored event is to this version of the service: one of its own, in domain terms; an
 * event some other program wrote into a service stream; or one of its own it cannot read (written
 * by a newer version, or a payload that is not its type's shape).
 */
export type StoredEventReading =
  { kind: 'own'; envelope: Envelope } | { kind: 'foreign'; reason: ForeignReason } | { kind: 'unreadable'; reason: string };

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);

/**
 * The service's metadata (EventMetadata): every event it writes carries it, and another
 * program's events do not. This, not the type, tells the service's events from others': an event
 * with the service's metadata and a type this version does not know was written by a newer version.
 */
const hasServiceMetadata = (metadata: Record<string, unknown>) =>
  typeof metadata.actor === 'string' &&
  typeof metadata.request_id === 'string' &&
  typeof metadata.occurred_at === 'string' &&
  Number.isInteger(metadata.schema_version) &&
  (metadata.schema_version as number) >= 1;

type FieldKind = 'string' | 'object' | 'documentation' | 'reason';
/** The fields of each event's data (events.ts) at the current schema version; `?` marks an optional one. */
const shapes: Record<DomainEvent['type'], Record<string, FieldKind | `${FieldKind}?`>> = {
  WorkspaceCreated: { id: 'string', organization_id: 'string', name: 'string', description: 'string', attributes: 'object' },
  WorkspaceUpdated: { id: 'string', name: 'string', description: 'string?', attributes: 'object?' },
  WorkspaceDeleted: { id: 'string', organization_id: 'string' },
  SolutionCreated: {
    id: 'string',
    organization_id: 'string',
    workspace_id: 'string',
    name: 'string',
    description: 'string',
    attributes: 'object',
    documentation: 'documentation',
  },
  SolutionUpdated: { id: 'string', name: 'string', description: 'string?', attributes: 'object?', documentation: 'documentation?' },
  SolutionDeleted: { id: 'string', organization_id: 'string', workspace_id: 'string', reason: 'reason' },
};

const fits: Record<FieldKind, (value: unknown) => boolean> = {
  string: (value) => typeof value === 'string',
  object: isObject,
  documentation: (value) => isObject(value) && Array.isArray(value.blocks),
  reason: (value) => value === 'requested' || value === 'workspace_deleted',
};

/** The shapes as lists of checks, made once: the projector and the rebuild check every event. */
const fieldChecks = Object.fromEntries(
  Object.entries(shapes).map(([type, fields]) => [
    type,
    Object.entries(fields).map(([field, expected]) => {
      const kind = expected.replace('?', '') as FieldKind;
      return { field, kind, fits: fits[kind], optional: expected.endsWith('?') };
    }),
  ]),
) as Record<DomainEvent['type'], { field: string; kind: FieldKind; fits: (value: unknown) => boolean; optional: boolean }[]>;

/** What is wrong with `data` for `type`, or undefined when it has the type's shape. */
function shapeProblem(type: DomainEvent['type'], data: unknown): string | undefined {
  if (!isObject(data)) return 'its data is not a JSON object';
  for (const { field, kind, fits: fitsKind, optional } of fieldChecks[type]) {
    const value = data[field];
    if (value === undefined && optional) continue;
    if (!fitsKind(value)) return `data.${field} is ${value === undefined ? 'missing' : `not a valid ${kind}`}`;
  }
  return undefined;
}

const isDomainEventType = (type: string): type is DomainEvent['type'] => workspaceEventTypes.has(type) || solutionEventTypes.has(type);

/** Whether the service wrote the event (readStoredEvent's kind is not 'foreign'), without reading it further. */
export const isServiceEvent = (recorded: StoredEvent) => isObject(recorded.metadata) && hasServiceMetadata(recorded.metadata);

export function readStoredEvent(recorded: StoredEvent): StoredEventReading {
  const metadata = recorded.metadata;
  if (!isObject(metadata)) return { kind: 'foreign', reason: 'no_metadata' };
  if (!hasServiceMetadata(metadata)) return { kind: 'foreign', reason: 'foreign_metadata' };
  const { type } = recorded;
  const version = metadata.schema_version as number;
  if (!isDomainEventType(type)) return { kind: 'unreadable', reason: `type ${type} is unknown to this version of the service` };
  if (version > currentSchemaVersion) {
    return {
      kind: 'unreadable',
      reason: `schema version ${version} is newer than this version of the service reads (${currentSchemaVersion})`,
    };
  }
  let envelope: Envelope;
  try {
    envelope = upcast(recorded);
  } catch (error) {
    return { kind: 'unreadable', reason: `upcasting from schema version ${version} failed: ${(error as Error).message}` };
  }
  const problem = shapeProblem(type, envelope.data);
  return problem ? { kind: 'unreadable', reason: `${type} ${problem}` } : { kind: 'own', envelope };
}

/** Lifts one of the service's own events to the current schema version (readStoredEvent checks it first). */
export function upcast(recorded: StoredEvent): Envelope {
  const metadata = recorded.metadata as EventMetadata;
  let data = recorded.data as Record<string, unknown>;
  for (let version = metadata.schema_version; version < currentSchemaVersion; version++) {
    const step = upcasters[recorded.type]?.[version];
    if (step) data = step(data);
  }
  return {
    type: recorded.type,
    data,
    metadata: { ...metadata, schema_version: currentSchemaVersion },
  } as Envelope<DomainEvent>;
}
