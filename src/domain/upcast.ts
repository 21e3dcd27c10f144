import type { RecordedEvent } from '../eventstore/port.js';
import { currentSchemaVersion, type DomainEvent, type Envelope, type EventMetadata } from './events.js';

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

export function upcast(recorded: RecordedEvent): Envelope {
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
