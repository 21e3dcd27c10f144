import type { Logger } from 'pino';
import type { EventStore } from '../eventstore/port.js';
import { solutionStream, workspaceStream } from '../eventstore/stream-names.js';
import type { Pool } from '../infra/postgres.js';
import { solutionDecider } from './deciders.js';
import { execute } from './execute.js';
import { upcast } from './upcast.js';

/**
 * Writes each solution's own SolutionDeleted after its workspace was deleted (contract §10).
 * The projector lists the solutions to do in `cascade_pending` in the same transaction that hides
 * them, so none is missed: not one created concurrently with the deletion, nor one left when a
 * process died half-way. Each deletion carries the actor, request and time of the workspace's.
 * Deleting is idempotent, so the delete command and the projector may both drain at once.
 */
export class CascadeWorker {
  private draining: Promise<void> | undefined;
  private drainAgain = false;

  constructor(
    private readonly store: EventStore,
    private readonly pool: Pool,
    private readonly logger: Logger,
  ) {}

  async drainWorkspace(workspaceId: string): Promise<void> {
    const { rows } = await this.pool.query<{ solution_id: string }>(
      'SELECT solution_id FROM cascade_pending WHERE workspace_id = $1',
      [workspaceId],
    );
    for (const row of rows) await this.cascade(row.solution_id, workspaceId);
  }

  /** Drains everything pending, in the background; overlapping calls coalesce into one more pass. */
  drainAll(): void {
    if (this.draining) {
      this.drainAgain = true;
      return;
    }
    this.draining = this.drainPass()
      .catch((error) => this.logger.warn({ err: (error as Error).message }, 'cascade deletion pass failed; retried on the next batch'))
      .finally(() => {
        this.draining = undefined;
        if (this.drainAgain) {
          this.drainAgain = false;
          this.drainAll();
        }
      });
  }

  async idle(): Promise<void> {
    while (this.draining) await this.draining;
  }

  private async drainPass(): Promise<void> {
    for (;;) {
      const { rows } = await this.pool.query<{ solution_id: string; workspace_id: string }>(
        'SELECT solution_id, workspace_id FROM cascade_pending ORDER BY solution_id LIMIT 500',
      );
      for (const row of rows) await this.cascade(row.solution_id, row.workspace_id);
      if (rows.length < 500) return;
    }
  }

  private async cascade(solutionId: string, workspaceId: string): Promise<void> {
    const workspaceEvents = await this.store.readStream(workspaceStream(workspaceId));
    const deletion = workspaceEvents.map(upcast).find((event) => event.type === 'WorkspaceDeleted');
    if (deletion) {
      const context = {
        actor: deletion.metadata.actor,
        requestId: deletion.metadata.request_id,
        now: deletion.metadata.occurred_at,
      };
      await execute(this.store, solutionStream(solutionId), solutionDecider, context.requestId, () => ({
        type: 'CascadeDeleteSolution' as const,
        id: solutionId,
        context,
      }));
    } else {
      this.logger.error({ solutionId, workspaceId }, 'cascade pending for a workspace that is not deleted; dropped');
    }
    await this.pool.query('DELETE FROM cascade_pending WHERE solution_id = $1', [solutionId]);
  }
}
