import { describe, expect, it } from 'vitest';
import { workspaceDecider } from '../../../src/domain/deciders.js';
import { currentSchemaVersion } from '../../../src/domain/events.js';
import type { WorkspaceCommand } from '../../../src/domain/workspace.js';
import { decideWorkspace, evolveWorkspace, initialWorkspaceState } from '../../../src/domain/workspace.js';
import { at, attributesOfSize, context, deciderSpec, metadata, workspaceCreated, workspaceDeleted, workspaceUpdated } from '../fixtures.js';

const given = deciderSpec({ initialState: initialWorkspaceState, decide: decideWorkspace, evolve: evolveWorkspace });

type Create = Extract<WorkspaceCommand, { type: 'CreateWorkspace' }>;
type Update = Extract<WorkspaceCommand, { type: 'UpdateWorkspace' }>;

const create = (now: string, fields: Partial<Omit<Create, 'type'>> = {}): Create => ({
  type: 'CreateWorkspace',
  id: 'ws_1',
  organizationId: 'org_acme',
  name: 'Lab',
  context: context(now),
  ...fields,
});
const update = (now: string, fields: Partial<Omit<Update, 'type'>> = {}): Update => ({
  type: 'UpdateWorkspace',
  id: 'ws_1',
  name: 'Lab',
  context: context(now),
  ...fields,
});
const remove = (now: string): WorkspaceCommand => ({ type: 'DeleteWorkspace', id: 'ws_1', context: context(now) });

describe('the workspace decider', () => {
  it('is the decider the command handlers use', () => {
    expect(workspaceDecider).toEqual({ initialState: { status: 'absent' }, decide: decideWorkspace, evolve: evolveWorkspace });
  });

  describe('CreateWorkspace', () => {
    it('given nothing, creates with the defaults for omitted fields', () => {
      given()
        .when(create(at('10:00:00.000000')))
        .then([workspaceCreated(at('10:00:00.000000'), { description: '', attributes: {} })]);
    });

    it('keeps the given description and attributes exactly as given', () => {
      const attributes = { color: 'blue', nested: { depth: [1, 2, { x: null }] } };
      given()
        .when(create(at('10:00:00.000000'), { name: ' Spaced  ', description: 'Line\nTwo', attributes }))
        .then([workspaceCreated(at('10:00:00.000000'), { name: ' Spaced  ', description: 'Line\nTwo', attributes })]);
    });

    it('records actor, request id and schema version as metadata, at the command time', () => {
      const [event] = given()
        .when(create(at('10:00:00.123456'), { context: context(at('10:00:00.123456'), { actor: 'user_bob', requestId: 'req_42' }) }))
        .then([workspaceCreated(at('10:00:00.123456'), {}, { actor: 'user_bob', request_id: 'req_42' })]);
      expect(event?.metadata).toEqual({
        actor: 'user_bob',
        request_id: 'req_42',
        occurred_at: '2024-05-01T10:00:00.123456Z',
        schema_version: currentSchemaVersion,
      });
    });

    it('treats creating the same record again as done (a re-run under one Idempotency-Key)', () => {
      given(workspaceCreated(at('10:00:00.000000')))
        .when(create(at('11:00:00.000000')))
        .then([]);
    });

    it('refuses an id that already exists with other values or was deleted (a collision is a bug, not a client error)', () => {
      given(workspaceCreated(at('10:00:00.000000'), { name: 'Other' }))
        .when(create(at('11:00:00.000000')))
        .thenError('internal_error');
      given(workspaceCreated(at('10:00:00.000000')), workspaceDeleted(at('10:30:00.000000')))
        .when(create(at('11:00:00.000000')))
        .thenError('internal_error');
    });

    it('folds into an active workspace whose updated_at equals created_at', () => {
      const { state } = given(workspaceCreated(at('10:00:00.000001'), { attributes: { a: 1 } }));
      expect(state).toEqual({
        status: 'active',
        workspace: {
          id: 'ws_1',
          organization_id: 'org_acme',
          name: 'Lab',
          description: '',
          attributes: { a: 1 },
          created_at: '2024-05-01T10:00:00.000001Z',
          updated_at: '2024-05-01T10:00:00.000001Z',
        },
      });
    });
  });

  describe('UpdateWorkspace', () => {
    const created = workspaceCreated(at('10:00:00.000000'), {
      name: 'Lab',
      description: 'first',
      attributes: { color: 'blue', size: { w: 1, h: 2 } },
    });

    it('with only a name, changes the name and keeps description and attributes', () => {
      const [event] = given(created)
        .when(update(at('11:00:00.000000'), { name: 'Renamed' }))
        .then([workspaceUpdated(at('11:00:00.000000'), { name: 'Renamed' })]);
      expect(event?.data).not.toHaveProperty('description');
      expect(event?.data).not.toHaveProperty('attributes');

      const { state } = given(created, event!);
      expect(state).toMatchObject({
        status: 'active',
        workspace: {
          name: 'Renamed',
          description: 'first',
          attributes: { color: 'blue', size: { w: 1, h: 2 } },
          created_at: '2024-05-01T10:00:00.000000Z',
          updated_at: '2024-05-01T11:00:00.000000Z',
        },
      });
    });

    it('replaces the description with a given string, the empty string included', () => {
      given(created)
        .when(update(at('11:00:00.000000'), { description: '' }))
        .then([workspaceUpdated(at('11:00:00.000000'), { description: '' })]);
    });

    it('applies attributes as a JSON Merge Patch and records the merged result', () => {
      given(created)
        .when(update(at('11:00:00.000000'), { attributes: { color: null, size: { h: null, d: 3 }, owner: 'team' } }))
        .then([workspaceUpdated(at('11:00:00.000000'), { attributes: { size: { w: 1, d: 3 }, owner: 'team' } })]);
    });

    it('merges onto the attributes as they are after earlier updates', () => {
      const first = workspaceUpdated(at('11:00:00.000000'), { attributes: { color: 'blue', size: { w: 1, h: 2 }, a: 1 } });
      given(created, first)
        .when(update(at('12:00:00.000000'), { attributes: { b: 2 } }))
        .then([workspaceUpdated(at('12:00:00.000000'), { attributes: { color: 'blue', size: { w: 1, h: 2 }, a: 1, b: 2 } })]);
    });

    it('removes a nested key with null and keeps an emptied object', () => {
      const nested = workspaceCreated(at('10:00:00.000000'), { attributes: { a: { b: { c: 1 } } } });
      given(nested)
        .when(update(at('11:00:00.000000'), { attributes: { a: { b: { c: null } } } }))
        .then([workspaceUpdated(at('11:00:00.000000'), { attributes: { a: { b: {} } } })]);
    });

    it('accepts merged attributes of exactly 64 KiB', () => {
      const big = workspaceCreated(at('10:00:00.000000'), { attributes: {} });
      given(big)
        .when(update(at('11:00:00.000000'), { attributes: attributesOfSize(64 * 1024) }))
        .then([workspaceUpdated(at('11:00:00.000000'), { attributes: attributesOfSize(64 * 1024) })]);
    });

    it('rejects a patch whose merged attributes exceed 64 KiB, though each part is within it', () => {
      const big = workspaceCreated(at('10:00:00.000000'), { attributes: attributesOfSize(40_000, 'a') });
      const error = given(big)
        .when(update(at('11:00:00.000000'), { attributes: attributesOfSize(30_000, 'b') }))
        .thenError('validation_error', 'params.attributes');
      expect(error.details?.[0]?.message).toMatch(/65536 bytes/);
    });

    it('measures the limit on the merged result: removing a key makes room', () => {
      const big = workspaceCreated(at('10:00:00.000000'), { attributes: attributesOfSize(40_000, 'a') });
      given(big)
        .when(update(at('11:00:00.000000'), { attributes: { a: null, ...attributesOfSize(60_000, 'b') } }))
        .then([workspaceUpdated(at('11:00:00.000000'), { attributes: attributesOfSize(60_000, 'b') })]);
    });

    it('of a workspace that never existed is not_found', () => {
      given()
        .when(update(at('11:00:00.000000')))
        .thenError('not_found');
    });

    it('of a deleted workspace is not_found', () => {
      given(created, workspaceDeleted(at('10:30:00.000000')))
        .when(update(at('11:00:00.000000')))
        .thenError('not_found');
    });

    it('is strictly after the previous change when the command time is equal to it', () => {
      given(created)
        .when(update(at('10:00:00.000000')))
        .then([workspaceUpdated(at('10:00:00.000001'))]);
    });

    it('is strictly after the previous change when the command time is earlier (clock skew)', () => {
      const updated = workspaceUpdated(at('10:00:05.999999'), { name: 'Later' });
      given(created, updated)
        .when(update(at('09:00:00.000000')))
        .then([workspaceUpdated(at('10:00:06.000000'))]);
    });

    it('carries the actor and request id of its own command', () => {
      given(created)
        .when(update(at('11:00:00.000000'), { context: context(at('11:00:00.000000'), { actor: 'user_carol', requestId: 'req_9' }) }))
        .then([workspaceUpdated(at('11:00:00.000000'), {}, { actor: 'user_carol', request_id: 'req_9' })]);
    });

    it('folds: created_at never changes, updated_at follows each update', () => {
      const { state } = given(
        created,
        workspaceUpdated(at('11:00:00.000000'), { name: 'Two' }),
        workspaceUpdated(at('12:00:00.000000'), { name: 'Three', description: 'third' }),
      );
      expect(state).toMatchObject({
        status: 'active',
        workspace: { name: 'Three', description: 'third', created_at: at('10:00:00.000000'), updated_at: at('12:00:00.000000') },
      });
    });
  });

  describe('DeleteWorkspace', () => {
    const created = workspaceCreated(at('10:00:00.000000'), { id: 'ws_1', organization_id: 'org_beta' });

    it('deletes an active workspace, naming its organization', () => {
      given(created)
        .when(remove(at('11:00:00.000000')))
        .then([workspaceDeleted(at('11:00:00.000000'), { id: 'ws_1', organization_id: 'org_beta' })]);
    });

    it('is strictly after the last update even with an earlier clock', () => {
      given(created, workspaceUpdated(at('12:00:00.000000')))
        .when(remove(at('11:00:00.000000')))
        .then([workspaceDeleted(at('12:00:00.000001'), { organization_id: 'org_beta' })]);
    });

    it('of a workspace that never existed is not_found', () => {
      given()
        .when(remove(at('11:00:00.000000')))
        .thenError('not_found');
    });

    it('of an already deleted workspace is not_found', () => {
      given(created, workspaceDeleted(at('11:00:00.000000'), { organization_id: 'org_beta' }))
        .when(remove(at('12:00:00.000000')))
        .thenError('not_found');
    });

    it('folds into the deleted state, keeping the record as it was and the deletion time', () => {
      const { state } = given(created, workspaceDeleted(at('11:00:00.000000')));
      expect(state).toMatchObject({ status: 'deleted', deleted_at: at('11:00:00.000000'), workspace: { id: 'ws_1', name: 'Lab' } });
    });

    it('ignores updates and deletions that follow a deletion when folding', () => {
      const deleted = given(created, workspaceDeleted(at('11:00:00.000000'))).state;
      const after = given(
        created,
        workspaceDeleted(at('11:00:00.000000')),
        workspaceUpdated(at('12:00:00.000000'), { name: 'Ghost' }),
        workspaceDeleted(at('13:00:00.000000')),
      ).state;
      expect(after).toEqual(deleted);
    });
  });

  it('evolve ignores an update of an absent workspace', () => {
    expect(evolveWorkspace(initialWorkspaceState, workspaceUpdated(at('10:00:00.000000')))).toEqual({ status: 'absent' });
  });

  it('emits the metadata fields and nothing else', () => {
    const [event] = decideWorkspace(create(at('10:00:00.000000')), initialWorkspaceState);
    expect(Object.keys(event!).sort()).toEqual(['data', 'metadata', 'type']);
    expect(event!.metadata).toEqual(metadata(at('10:00:00.000000')));
  });
});
