import { describe, expect, it } from 'vitest';
import type { CommandContext } from '../../../src/domain/command.js';
import { solutionDecider } from '../../../src/domain/deciders.js';
import { currentSchemaVersion } from '../../../src/domain/events.js';
import { decideSolution, evolveSolution, initialSolutionState, type SolutionCommand } from '../../../src/domain/solution.js';
import { at, attributesOfSize, context, deciderSpec, solutionCreated, solutionDeleted, solutionUpdated } from '../fixtures.js';

const given = deciderSpec({ initialState: initialSolutionState, decide: decideSolution, evolve: evolveSolution });

type Create = Extract<SolutionCommand, { type: 'CreateSolution' }>;
type Update = Extract<SolutionCommand, { type: 'UpdateSolution' }>;

const workspace = { id: 'ws_1', organization_id: 'org_acme' };

const create = (now: string, fields: Partial<Omit<Create, 'type'>> = {}): Create => ({
  type: 'CreateSolution',
  id: 'sol_1',
  workspace,
  name: 'Pump',
  context: context(now),
  ...fields,
});
const update = (now: string, fields: Partial<Omit<Update, 'type'>> = {}): Update => ({
  type: 'UpdateSolution',
  id: 'sol_1',
  name: 'Pump',
  context: context(now),
  ...fields,
});
const remove = (now: string, overrides: Partial<CommandContext> = {}): SolutionCommand => ({
  type: 'DeleteSolution',
  id: 'sol_1',
  context: context(now, overrides),
});
const cascade = (now: string, overrides: Partial<CommandContext> = {}): SolutionCommand => ({
  type: 'CascadeDeleteSolution',
  id: 'sol_1',
  context: context(now, overrides),
});

const docs = (...contents: string[]) => ({ blocks: contents.map((content) => ({ type: 'text' as const, content })) });

describe('the solution decider', () => {
  it('is the decider the command handlers use', () => {
    expect(solutionDecider).toEqual({ initialState: { status: 'absent' }, decide: decideSolution, evolve: evolveSolution });
  });

  describe('CreateSolution', () => {
    it('given nothing, creates in the workspace with the defaults for omitted fields', () => {
      given()
        .when(create(at('10:00:00.000000')))
        .then([
          solutionCreated(at('10:00:00.000000'), {
            workspace_id: 'ws_1',
            organization_id: 'org_acme',
            description: '',
            attributes: {},
            documentation: { blocks: [] },
          }),
        ]);
    });

    it('keeps given description, attributes and documentation', () => {
      given()
        .when(create(at('10:00:00.000000'), { description: 'd', attributes: { k: [1] }, documentation: docs('hello', '') }))
        .then([solutionCreated(at('10:00:00.000000'), { description: 'd', attributes: { k: [1] }, documentation: docs('hello', '') })]);
    });

    it('takes the organization from the workspace', () => {
      given()
        .when(create(at('10:00:00.000000'), { workspace: { id: 'ws_9', organization_id: 'org_beta' } }))
        .then([solutionCreated(at('10:00:00.000000'), { workspace_id: 'ws_9', organization_id: 'org_beta' })]);
    });

    it("accepts an organization_id equal to the workspace's", () => {
      given()
        .when(create(at('10:00:00.000000'), { organizationId: 'org_acme' }))
        .then([solutionCreated(at('10:00:00.000000'))]);
    });

    it("rejects an organization_id other than the workspace's as a validation_error", () => {
      given()
        .when(create(at('10:00:00.000000'), { organizationId: 'org_other' }))
        .thenError('validation_error', 'params.organization_id');
    });

    it('records actor, request id and schema version', () => {
      given()
        .when(create(at('10:00:00.000000'), { context: context(at('10:00:00.000000'), { actor: 'user_bob', requestId: 'req_7' }) }))
        .then([
          solutionCreated(at('10:00:00.000000'), {}, { actor: 'user_bob', request_id: 'req_7', schema_version: currentSchemaVersion }),
        ]);
    });

    it('treats creating the same record again as done, and refuses an id taken by another record', () => {
      given(solutionCreated(at('10:00:00.000000')))
        .when(create(at('11:00:00.000000')))
        .then([]);
      given(solutionCreated(at('10:00:00.000000'), { name: 'Other' }))
        .when(create(at('11:00:00.000000')))
        .thenError('internal_error');
    });

    it('folds into an active solution whose updated_at equals created_at', () => {
      const { state } = given(solutionCreated(at('10:00:00.000000'), { documentation: docs('x') }));
      expect(state).toEqual({
        status: 'active',
        solution: {
          id: 'sol_1',
          organization_id: 'org_acme',
          workspace_id: 'ws_1',
          name: 'Pump',
          description: '',
          attributes: {},
          documentation: docs('x'),
          created_at: at('10:00:00.000000'),
          updated_at: at('10:00:00.000000'),
        },
      });
    });
  });

  describe('UpdateSolution', () => {
    const created = solutionCreated(at('10:00:00.000000'), {
      description: 'first',
      attributes: { a: { b: 1, c: 2 } },
      documentation: docs('one'),
    });

    it('with only a name, keeps description, attributes and documentation', () => {
      const [event] = given(created)
        .when(update(at('11:00:00.000000'), { name: 'Valve' }))
        .then([solutionUpdated(at('11:00:00.000000'), { name: 'Valve' })]);
      const { state } = given(created, event!);
      expect(state).toMatchObject({
        status: 'active',
        solution: {
          name: 'Valve',
          description: 'first',
          attributes: { a: { b: 1, c: 2 } },
          documentation: docs('one'),
          created_at: at('10:00:00.000000'),
          updated_at: at('11:00:00.000000'),
        },
      });
    });

    it('replaces the documentation as a whole', () => {
      given(created)
        .when(update(at('11:00:00.000000'), { documentation: docs('two', 'three') }))
        .then([solutionUpdated(at('11:00:00.000000'), { documentation: docs('two', 'three') })]);
      given(created)
        .when(update(at('11:00:00.000000'), { documentation: { blocks: [] } }))
        .then([solutionUpdated(at('11:00:00.000000'), { documentation: { blocks: [] } })]);
    });

    it('merges attributes as a JSON Merge Patch, removing nested keys with null', () => {
      given(created)
        .when(update(at('11:00:00.000000'), { attributes: { a: { c: null, d: [null] }, e: 'new' } }))
        .then([solutionUpdated(at('11:00:00.000000'), { attributes: { a: { b: 1, d: [null] }, e: 'new' } })]);
    });

    it('rejects merged attributes over 64 KiB', () => {
      const big = solutionCreated(at('10:00:00.000000'), { attributes: attributesOfSize(64 * 1024 - 10, 'a') });
      given(big)
        .when(update(at('11:00:00.000000'), { attributes: { b: 'more than ten bytes' } }))
        .thenError('validation_error', 'params.attributes');
    });

    it('of a solution that never existed is not_found', () => {
      given()
        .when(update(at('11:00:00.000000')))
        .thenError('not_found');
    });

    it('of a deleted solution is not_found', () => {
      given(created, solutionDeleted(at('10:30:00.000000')))
        .when(update(at('11:00:00.000000')))
        .thenError('not_found');
    });

    it('of a solution deleted with its workspace is not_found', () => {
      given(created, solutionDeleted(at('10:30:00.000000'), { reason: 'workspace_deleted' }))
        .when(update(at('11:00:00.000000')))
        .thenError('not_found');
    });

    it('is strictly after the previous change when the command time is equal or earlier', () => {
      given(created)
        .when(update(at('10:00:00.000000')))
        .then([solutionUpdated(at('10:00:00.000001'))]);
      given(created, solutionUpdated(at('10:59:59.999999')))
        .when(update(at('10:00:00.000000')))
        .then([solutionUpdated(at('11:00:00.000000'))]);
    });
  });

  describe('DeleteSolution and CascadeDeleteSolution', () => {
    const created = solutionCreated(at('10:00:00.000000'), { organization_id: 'org_beta', workspace_id: 'ws_7' });

    it('DeleteSolution carries the reason "requested"', () => {
      given(created)
        .when(remove(at('11:00:00.000000')))
        .then([solutionDeleted(at('11:00:00.000000'), { organization_id: 'org_beta', workspace_id: 'ws_7', reason: 'requested' })]);
    });

    it('CascadeDeleteSolution carries the reason "workspace_deleted" and the actor of the workspace deletion', () => {
      given(created)
        .when(cascade(at('11:00:00.000000'), { actor: 'user_dave', requestId: 'req_ws_delete' }))
        .then([
          solutionDeleted(
            at('11:00:00.000000'),
            { organization_id: 'org_beta', workspace_id: 'ws_7', reason: 'workspace_deleted' },
            { actor: 'user_dave', request_id: 'req_ws_delete' },
          ),
        ]);
    });

    it('DeleteSolution of an absent or deleted solution is not_found', () => {
      given()
        .when(remove(at('11:00:00.000000')))
        .thenError('not_found');
      given(created, solutionDeleted(at('10:30:00.000000')))
        .when(remove(at('11:00:00.000000')))
        .thenError('not_found');
    });

    it('CascadeDeleteSolution is idempotent: no events when already deleted, whatever the reason', () => {
      given(created, solutionDeleted(at('10:30:00.000000'), { reason: 'workspace_deleted' }))
        .when(cascade(at('11:00:00.000000')))
        .then([]);
      given(created, solutionDeleted(at('10:30:00.000000'), { reason: 'requested' }))
        .when(cascade(at('11:00:00.000000')))
        .then([]);
    });

    it('CascadeDeleteSolution of a solution that never existed emits nothing', () => {
      given()
        .when(cascade(at('11:00:00.000000')))
        .then([]);
    });

    it('a deletion is strictly after the last change when the clock is behind', () => {
      given(created, solutionUpdated(at('12:00:00.000000')))
        .when(cascade(at('11:00:00.000000')))
        .then([solutionDeleted(at('12:00:00.000001'), { organization_id: 'org_beta', workspace_id: 'ws_7', reason: 'workspace_deleted' })]);
    });

    it('folds into the deleted state and ignores what follows', () => {
      const { state } = given(
        created,
        solutionDeleted(at('11:00:00.000000')),
        solutionUpdated(at('12:00:00.000000'), { name: 'Ghost' }),
        solutionDeleted(at('13:00:00.000000')),
      );
      expect(state).toMatchObject({ status: 'deleted', deleted_at: at('11:00:00.000000'), solution: { name: 'Pump' } });
    });
  });

  it('evolve ignores an update of an absent solution', () => {
    expect(evolveSolution(initialSolutionState, solutionUpdated(at('10:00:00.000000')))).toEqual({ status: 'absent' });
  });
});
