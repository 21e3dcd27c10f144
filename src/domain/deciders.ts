import type { DomainEvent, Envelope, SolutionEvent, WorkspaceEvent } from './events.js';
import { decideSolution, evolveSolution, initialSolutionState, type SolutionCommand, type SolutionState } from './solution.js';
import { decideWorkspace, evolveWorkspace, initialWorkspaceState, type WorkspaceCommand, type WorkspaceState } from './workspace.js';

/** A record's behaviour as pure functions: where it starts, what a command decides, and how an event changes it. */
export type Decider<Command, State, Event extends DomainEvent> = {
  initialState: State;
  decide: (command: Command, state: State) => Envelope<Event>[];
  evolve: (state: State, event: Envelope<Event>) => State;
};

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
