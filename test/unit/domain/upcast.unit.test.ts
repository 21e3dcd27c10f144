import { describe, expect, it } from 'vitest';
import type { RecordedEvent } from '../../../src/eventstore/port.js';
import { currentSchemaVersion, type EventMetadata } from '../../../src/domain/events.js';
import { readStoredEvent, upcast } from '../../../src/domain/upcast.js';
import {
  at,
  metadata,
  solutionCreated,
  solutionDeleted,
  solutionUpdated,
  workspaceCreated,
  workspaceDeleted,
  workspaceUpdated,
} from '../fixtures.js';

const recorded = (event: { type: string; data: unknown; metadata: unknown }): RecordedEvent => ({
  id: '00000000-0000-8000-8000-000000000000',
  streamName: 'solution-sol_1',
  version: 1n,
  position: { commit: 5n, prepare: 7n },
  ...event,
});

/** An event as a version-`version` writer stored it. */
const storedAt = (version: number, event: { type: string; data: unknown; metadata: EventMetadata }) =>
  recorded({ ...event, metadata: { ...event.metadata, schema_version: version } });

/** A SolutionDeleted as schema version 1 stored it: without `reason`. */
function version1SolutionDeleted() {
  const { reason: _reason, ...data } = solutionDeleted(at('10:00:00.000000')).data;
  return storedAt(1, { type: 'SolutionDeleted', data, metadata: metadata(at('10:00:00.000000'), { actor: 'user_old' }) });
}

describe('upcast', () => {
  it('is at schema version 2: SolutionDeleted carries reason', () => {
    expect(currentSchemaVersion).toBe(2);
  });

  it('gives a current event as the domain envelope: type, data and metadata only', () => {
    const event = workspaceCreated(at('10:00:00.000000'), { attributes: { a: 1 } });
    const result = upcast(recorded(event));
    expect(result).toEqual(event);
    expect(Object.keys(result).sort()).toEqual(['data', 'metadata', 'type']);
  });

  it('fills in reason "requested" on a version-1 SolutionDeleted and lifts it to the current version', () => {
    const result = upcast(version1SolutionDeleted());
    expect(result).toEqual(
      solutionDeleted(at('10:00:00.000000'), { reason: 'requested' }, { actor: 'user_old', schema_version: currentSchemaVersion }),
    );
  });

  it('keeps the reason of a current SolutionDeleted, workspace_deleted included', () => {
    const event = solutionDeleted(at('10:00:00.000000'), { reason: 'workspace_deleted' });
    expect(upcast(recorded(event))).toEqual(event);
  });

  it.each([
    workspaceCreated(at('10:00:00.000000')),
    workspaceUpdated(at('10:00:00.000000'), { description: 'd' }),
    workspaceDeleted(at('10:00:00.000000')),
    solutionCreated(at('10:00:00.000000')),
    solutionUpdated(at('10:00:00.000000'), { attributes: { a: 1 } }),
  ])('lifts a version-1 $type to the current version with its data unchanged', (event) => {
    const result = upcast(storedAt(1, event));
    expect(result.data).toEqual(event.data);
    expect(result.metadata).toEqual({ ...event.metadata, schema_version: currentSchemaVersion });
  });

  it('does not change the recorded event it reads', () => {
    const stored = version1SolutionDeleted();
    const before = structuredClone(stored);
    upcast(stored);
    expect(stored).toEqual(before);
  });
});

describe('readStoredEvent: the service’s own events, other programs’, and own ones this version cannot read', () => {
  const created = workspaceCreated(at('10:00:00.000000'));

  it('reads an event of the service’s own in domain terms', () => {
    expect(readStoredEvent(recorded(created))).toEqual({ kind: 'own', envelope: created });
  });

  it.each([
    ['no metadata', null, 'no_metadata'],
    ['binary metadata', new Uint8Array([1, 2]), 'no_metadata'],
    ['another program’s metadata', { $correlationId: 'x', source: 'crm' }, 'foreign_metadata'],
    ['metadata without a schema version', { actor: 'a', request_id: 'r', occurred_at: at('10:00:00.000000') }, 'foreign_metadata'],
  ])('tells a foreign event by its metadata: %s', (_, foreignMetadata, reason) => {
    expect(readStoredEvent(recorded({ ...created, metadata: foreignMetadata }))).toEqual({ kind: 'foreign', reason });
    expect(readStoredEvent(recorded({ type: 'OrderPlaced', data: {}, metadata: foreignMetadata }))).toEqual({ kind: 'foreign', reason });
  });

  it.each([
    ['a type this version does not know', { type: 'WorkspaceArchived', data: { id: 'ws_1' } }, /type WorkspaceArchived is unknown/],
    [
      'a newer schema version',
      { ...created, metadata: metadata(at('10:00:00.000000'), { schema_version: 3 }) },
      /schema version 3 is newer/,
    ],
    [
      'a field of the wrong type',
      { ...workspaceUpdated(at('10:00:00.000000')), data: { id: 'ws_1', name: 7 } },
      /data.name is not a valid string/,
    ],
    ['a missing field', { ...created, data: { id: 'ws_1', name: 'n' } }, /data.organization_id is missing/],
    ['data that is not an object', { ...created, data: 'text' }, /data is not a JSON object/],
  ])('finds an own event it cannot read: %s', (_, event, reason) => {
    const reading = readStoredEvent(recorded({ metadata: metadata(at('10:00:00.000000')), ...event }));
    expect(reading).toEqual({ kind: 'unreadable', reason: expect.stringMatching(reason) });
  });
});
