import type { Envelope, WorkspaceEvent } from '../domain/events.js';
import { evolveWorkspace, type Workspace } from '../domain/workspace.js';

/** A row is the record's shape as the domain defines it: a type only, so src/read takes it without any domain code. */
export type WorkspaceRow = Workspace;

/** A row of the workspaces table: the record while it is active, nothing once deleted. */
export function evolveWorkspaceRow(row: WorkspaceRow | null, event: Envelope<WorkspaceEvent>): WorkspaceRow | null {
  const state = evolveWorkspace(row ? { status: 'active', workspace: row } : { status: 'absent' }, event);
  return state.status === 'active' ? state.workspace : null;
}
