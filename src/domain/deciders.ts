import type { Decider } from '../write/execute.js';
import type { SolutionEvent, WorkspaceEvent } from './events.js';
import { decideSolution, evolveSolution, initialSolutionState, type SolutionCommand, type SolutionState } from './solution.js';
import { decideWorkspace, evolveWorkspace, initialWorkspaceState, type WorkspaceCommand, type WorkspaceState } from './workspace.js';

export const workspaceDecider: Decider<WorkspaceCommand, WorkspaceState, WorkspaceEvent> = {
  initialState: initialWorkspaceState,
  decide: decideWorkspace,
  evolve: evolveWorkspace,
};

export const solutionDecider: Decider<SolutionCommand, SolutionState, SolutionEvent> = {
  initialState: initialSolutionState,
  decide: decideSolution,
  evolve: evolveSolution,
};
