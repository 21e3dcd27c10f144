import { describe, expect, it } from 'vitest';
import type { RecordedEvent } from '../../../src/eventstore/port.js';
import { readStoredEvent } from '../../../src/domain/upcast.js';
import { at, metadata, workspaceCreated, workspaceUpdated } from '../fixtures.js';

const recorded = (event: { type: string; data: unknown; metadata: unknown }): RecordedEvent => ({
  id: '00000000-0000-8000-8000-000000000000',
  streamName: 'workspace-ws_1',
  version: 1n,
  position: { commit: 5n, prepare: 7n },
  ...event,
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
