import { RecordIdTaken, RecordNotFound } from './errors.js';
import { assertNever, envelope, type CommandContext } from './command.js';
import type { Envelope, WorkspaceEvent, WorkspaceUpdated } from './events.js';
import type { JsonObject } from './merge-patch.js';
import type { Timestamp } from './timestamp.js';
import { mergeAttributes } from './values.js';

export type Workspace = {
  id: string;
  organization_id: string;
  created_at: Timestamp;
  updated_at: Timestamp;
  name: string;
  description: string;
  attributes: JsonObject;
};

export type WorkspaceState =
  { status: 'absent' } | { status: 'active'; workspace: Workspace } | { status: 'deleted'; workspace: Workspace; deleted_at: Timestamp };

export type WorkspaceCommand =
  | {
      type: 'CreateWorkspace';
      id: string;
      organizationId: string;
      name: string;
      description?: string | undefined;
      attributes?: JsonObject | undefined;
      context: CommandContext;
    }
  | {
      type: 'UpdateWorkspace';
      id: string;
      name: string;
      description?: string | undefined;
      /** A JSON Merge Patch onto the current attributes (contract §7). */
      attributes?: JsonObject | undefined;
      context: CommandContext;
    }
  | { type: 'DeleteWorkspace'; id: string; context: CommandContext };

export const initialWorkspaceState: WorkspaceState = { status: 'absent' };

/** Whether `record` still holds exactly the values in `created` (an unchanged record created that way). */
export const createdAs = (record: object, created: Record<string, unknown>) =>
  Object.entries(created).every(([key, value]) => JSON.stringify((record as Record<string, unknown>)[key]) === JSON.stringify(value));

export function decideWorkspace(command: WorkspaceCommand, state: WorkspaceState): Envelope<WorkspaceEvent>[] {
  switch (command.type) {
    case 'CreateWorkspace': {
      const data = {
        id: command.id,
        organization_id: command.organizationId,
        name: command.name,
        description: command.description ?? '',
        attributes: command.attributes ?? {},
      };
      if (state.status !== 'absent') {
        // Ids derived from an Idempotency-Key make a re-run create the same record: already done.
        if (state.status === 'active' && createdAs(state.workspace, data)) return [];
        throw new RecordIdTaken('workspace');
      }
      return [envelope({ type: 'WorkspaceCreated', data }, command.context, undefined)];
    }
    case 'UpdateWorkspace': {
      if (state.status !== 'active') throw new RecordNotFound('workspace');
      const { workspace } = state;
      const data: WorkspaceUpdated['data'] = { id: workspace.id, name: command.name };
      if (command.description !== undefined) data.description = command.description;
      if (command.attributes !== undefined) data.attributes = mergeAttributes(workspace.attributes, command.attributes);
      return [envelope({ type: 'WorkspaceUpdated', data }, command.context, workspace.updated_at)];
    }
    case 'DeleteWorkspace': {
      if (state.status !== 'active') throw new RecordNotFound('workspace');
      const { workspace } = state;
      const data = { id: workspace.id, organization_id: workspace.organization_id };
      return [envelope({ type: 'WorkspaceDeleted', data }, command.context, workspace.updated_at)];
    }
    default:
      return assertNever(command);
  }
}

export function evolveWorkspace(state: WorkspaceState, event: Envelope<WorkspaceEvent>): WorkspaceState {
  const at = event.metadata.occurred_at;
  switch (event.type) {
    case 'WorkspaceCreated':
      return { status: 'active', workspace: { ...event.data, created_at: at, updated_at: at } };
    case 'WorkspaceUpdated': {
      if (state.status !== 'active') return state;
      const { id: _id, ...changes } = event.data;
      return { status: 'active', workspace: { ...state.workspace, ...changes, updated_at: at } };
    }
    case 'WorkspaceDeleted':
      if (state.status !== 'active') return state;
      return { status: 'deleted', workspace: state.workspace, deleted_at: at };
    default:
      return assertNever(event);
  }
}
