import { InvalidValue, RecordIdTaken, RecordNotFound } from './errors.js';
import { assertNever, envelope, type CommandContext } from './command.js';
import type { Envelope, SolutionEvent, SolutionUpdated } from './events.js';
import type { JsonObject } from './merge-patch.js';
import type { Timestamp } from './timestamp.js';
import { emptyDocumentation, mergeAttributes, type Documentation } from './values.js';
import { createdAs } from './workspace.js';

export type Solution = {
  id: string;
  organization_id: string;
  workspace_id: string;
  created_at: Timestamp;
  updated_at: Timestamp;
  name: string;
  description: string;
  attributes: JsonObject;
  documentation: Documentation;
};

export type SolutionState =
  { status: 'absent' } | { status: 'active'; solution: Solution } | { status: 'deleted'; solution: Solution; deleted_at: Timestamp };

/** The workspace a solution is created in, as the command handler found it (active and accessible). */
export type ParentWorkspace = { id: string; organization_id: string };

export type SolutionCommand =
  | {
      type: 'CreateSolution';
      id: string;
      workspace: ParentWorkspace;
      /** The optional `organization_id` parameter; it must name the workspace's organization (contract §10). */
      organizationId?: string | undefined;
      name: string;
      description?: string | undefined;
      attributes?: JsonObject | undefined;
      documentation?: Documentation | undefined;
      context: CommandContext;
    }
  | {
      type: 'UpdateSolution';
      id: string;
      name: string;
      description?: string | undefined;
      attributes?: JsonObject | undefined;
      documentation?: Documentation | undefined;
      context: CommandContext;
    }
  | { type: 'DeleteSolution'; id: string; context: CommandContext }
  /** Part of deleting a workspace: idempotent, since a cascade may be retried after a crash. */
  | { type: 'CascadeDeleteSolution'; id: string; context: CommandContext };

export const initialSolutionState: SolutionState = { status: 'absent' };

export function decideSolution(command: SolutionCommand, state: SolutionState): Envelope<SolutionEvent>[] {
  switch (command.type) {
    case 'CreateSolution': {
      const { workspace } = command;
      if (command.organizationId !== undefined && command.organizationId !== workspace.organization_id) {
        throw new InvalidValue('organization_id', "must be the workspace's organization");
      }
      const data = {
        id: command.id,
        organization_id: workspace.organization_id,
        workspace_id: workspace.id,
        name: command.name,
        description: command.description ?? '',
        attributes: command.attributes ?? {},
        documentation: command.documentation ?? emptyDocumentation(),
      };
      if (state.status !== 'absent') {
        // Ids derived from an Idempotency-Key make a re-run create the same record: already done.
        if (state.status === 'active' && createdAs(state.solution, data)) return [];
        throw new RecordIdTaken('solution');
      }
      return [envelope({ type: 'SolutionCreated', data }, command.context, undefined)];
    }
    case 'UpdateSolution': {
      if (state.status !== 'active') throw new RecordNotFound('solution');
      const { solution } = state;
      const data: SolutionUpdated['data'] = { id: solution.id, name: command.name };
      if (command.description !== undefined) data.description = command.description;
      if (command.attributes !== undefined) data.attributes = mergeAttributes(solution.attributes, command.attributes);
      if (command.documentation !== undefined) data.documentation = command.documentation;
      return [envelope({ type: 'SolutionUpdated', data }, command.context, solution.updated_at)];
    }
    case 'DeleteSolution':
    case 'CascadeDeleteSolution': {
      if (state.status !== 'active') {
        if (command.type === 'CascadeDeleteSolution') return [];
        throw new RecordNotFound('solution');
      }
      const { solution } = state;
      const data = {
        id: solution.id,
        organization_id: solution.organization_id,
        workspace_id: solution.workspace_id,
        reason: command.type === 'DeleteSolution' ? ('requested' as const) : ('workspace_deleted' as const),
      };
      return [envelope({ type: 'SolutionDeleted', data }, command.context, solution.updated_at)];
    }
    default:
      return assertNever(command);
  }
}

export function evolveSolution(state: SolutionState, event: Envelope<SolutionEvent>): SolutionState {
  const at = event.metadata.occurred_at;
  switch (event.type) {
    case 'SolutionCreated':
      return { status: 'active', solution: { ...event.data, created_at: at, updated_at: at } };
    case 'SolutionUpdated': {
      if (state.status !== 'active') return state;
      const { id: _id, ...changes } = event.data;
      return { status: 'active', solution: { ...state.solution, ...changes, updated_at: at } };
    }
    case 'SolutionDeleted':
      if (state.status !== 'active') return state;
      return { status: 'deleted', solution: state.solution, deleted_at: at };
    default:
      return assertNever(event);
  }
}
