import type { Logger } from 'pino';
import { readRecord } from '../eventstore/event-log.js';
import type { EventStore } from '../eventstore/port.js';
import { solutionStream, workspaceStream } from '../eventstore/stream-names.js';
import type { Pool } from '../infra/postgres.js';
import type { CommandContext } from '../domain/command.js';
import { solutionDecider } from '../domain/deciders.js';
import { execute, type CommandObserver } from './execute.js';

const parallelAppends = 8;
const maxRetryDelayMs = 30_000;

/**
 * Writes each solution's own SolutionDeleted after its workspace was deleted (contract §10).
 * The projector lists the solutions to do in `cascade_pending` in the same transaction that hides
 * them, so none is missed: not one created concurrently with the deletion, nor one left when a
 * process died half-way. Each deletion carries the actor, request and time of the workspace's.
 * Deleting is idempotent, so the delete command and the projector may both drain at once; a
 * failed pass is retried with back-off until the list is empty.
 */
export class CascadeWorker {
  private draining: Promise<void> | undefined;
  private drainAgain = false;
  private retryDelayMs = 1000;
  private retryTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly store: EventStore,
    private readonly pool: Pool,
    private readonly logger: Logger,
    /** Told of each version conflict a cascade deletion runs into (metrics). */
    private readonly observer?: CommandObserver,
  ) {}

  async drainWorkspace(workspaceId: string): Promise<void> {
    const { rows } = await this.pool.query<{ solution_id: string }>('SELECT solution_id FROM cascade_pending WHERE workspace_id = $1', [
      workspaceId,
    ]);
    await this.cascadeWorkspace(
      workspaceId,
      rows.map((row) => row.solution_id),
    );
  }

  /** How many solutions are waiting for their own SolutionDeleted (the backlog the worker drains). */
  async pendingCount(): Promise<number> {
    const { rows } = await this.pool.query<{ pending: number }>('SELECT count(*)::int AS pending FROM cascade_pending');
    return rows[0]!.pending;
  }

  /** Drains everything pending, in the background; overlapping calls coalesce into one more pass. */
  drainAll(): void {
    if (this.closed) return;
    if (this.draining) {
      this.drainAgain = true;
      return;
    }
    clearTimeout(this.retryTimer);
    this.draining = this.drainPass()
      .then(() => {
        this.retryDelayMs = 1000;
      })
      .catch((error) => {
        this.logger.warn({ err: (error as Error).message, retryInMs: this.retryDelayMs }, 'cascade deletion pass failed; retrying');
        this.retryTimer = setTimeout(() => this.drainAll(), this.retryDelayMs);
        this.retryTimer.unref();
        this.retryDelayMs = Math.min(this.retryDelayMs * 2, maxRetryDelayMs);
      })
      .finally(() => {
        this.draining = undefined;
        if (this.drainAgain) {
          this.drainAgain = false;
          this.drainAll();
        }
      });
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    while (this.draining) await this.draining;
  }

  private async drainPass(): Promise<void> {
    for (;;) {
      const { rows } = await this.pool.query<{ solution_id: string; workspace_id: string }>(
        'SELECT solution_id, workspace_id FROM cascade_pending ORDER BY workspace_id, solution_id LIMIT 1000',
      );
      const byWorkspace = new Map<string, string[]>();
      for (const row of rows) byWorkspace.set(row.workspace_id, [...(byWorkspace.get(row.workspace_id) ?? []), row.solution_id]);
      for (const [workspaceId, solutionIds] of byWorkspace) await this.cascadeWorkspace(workspaceId, solutionIds);
      if (rows.length < 1000) return;
    }
  }

  private async cascadeWorkspace(workspaceId: string, solutionIds: string[]): Promise<void> {
    if (solutionIds.length === 0) return;
    const deletion = (await readRecord(this.store, workspaceStream(workspaceId))).events
      .map((logged) => logged.event)
      .find((event) => event.type === 'WorkspaceDeleted');
    if (!deletion) {
      this.logger.error({ workspaceId, solutionIds }, 'cascade pending for a workspace that is not deleted; dropped');
    }
    const context: CommandContext | undefined = deletion && {
      actor: deletion.metadata.actor,
      requestId: deletion.metadata.request_id,
      now: deletion.metadata.occurred_at,
    };
    const queue = [...solutionIds];
    const worker = async () => {
      for (let solutionId = queue.pop(); solutionId !== undefined; solutionId = queue.pop()) {
        if (context) await this.cascadeSolution(solutionId, context);
        await this.pool.query('DELETE FROM cascade_pending WHERE solution_id = $1', [solutionId]);
      }
    };
    await Promise.all(Array.from({ length: Math.min(parallelAppends, solutionIds.length) }, worker));
  }

  private async cascadeSolution(solutionId: string, context: CommandContext): Promise<void> {
    await execute(
      this.store,
      solutionStream(solutionId),
      solutionDecider,
      { requestId: context.requestId },
      () => ({
        type: 'CascadeDeleteSolution' as const,
        id: solutionId,
        context,
      }),
      { observer: this.observer },
    );
  }
}
