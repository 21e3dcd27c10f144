import { assertNever } from '../domain/command.js';
import type { Envelope, SolutionEvent, WorkspaceDeleted } from '../domain/events.js';
import { evolveSolution, type Solution } from '../domain/solution.js';

/** A row is the record's shape as the domain defines it: a type only, so src/read takes it without any domain code. */
export type SolutionRow = Solution;

/**
 * A row of the solutions table. A workspace's deletion removes its solutions at once (contract
 * §10); a creation that lands after its workspace was deleted never shows (`parentActive` false).
 */
export function evolveSolutionRow(
  row: SolutionRow | null,
  event: Envelope<SolutionEvent | WorkspaceDeleted>,
  parentActive: boolean,
): SolutionRow | null {
  switch (event.type) {
    case 'WorkspaceDeleted':
      return row && row.workspace_id === event.data.id ? null : row;
    case 'SolutionCreated':
      if (!parentActive) return null;
      return rowOf(evolveSolution({ status: 'absent' }, event));
    case 'SolutionUpdated':
    case 'SolutionDeleted':
      return rowOf(evolveSolution(row ? { status: 'active', solution: row } : { status: 'absent' }, event));
    default:
      return assertNever(event);
  }
}

const rowOf = (state: ReturnType<typeof evolveSolution>): SolutionRow | null => (state.status === 'active' ? state.solution : null);
