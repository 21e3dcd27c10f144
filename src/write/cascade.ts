import type { Logger } from 'pino';
import { readRecord } from '../eventstore/event-log.js';
import { latestPosition, type EventStore, type GlobalPosition } from '../eventstore/port.js';
import { solutionStream, workspaceStream } from '../eventstore/stream-names.js';
import type { Pool } from '../infra/postgres.js';
import type { CommandContext } from '../domain/command.js';
import { solutionDecider } from '../domain/deciders.js';
import { execute, type CommandObserver } from './execute.js';

const parallelAppends = 8;
const maxRetryDelayMs = 30_000;
/** Solutions still to do read at a time by a pass. */
const drainPage = 1000;
/** How long a written deletion stays listed: far longer than any delete_workspace waits to answer. */
const doneKeptFor = '1 hour';

/**
 * Writes each solution's own SolutionDeleted after its workspace was deleted (contract §10).
 * The projector lists the solutions to do in `cascade_pending` in the same transaction that hides
 * them, so none is missed: not one created concurrently with the deletion, nor one left when a
 * process died half-way. Each deletion carries the actor, request and time of the workspace's.
 * Deleting is idempotent, so the delete command and the projector may both drain at once; a
 * failed pass is retried with back-off until the list is empty. A deletion written stays listed
 * for a while with its position in the log, for the delete command to wait for (drainWorkspace).
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

  /**
   * Writes the deletions still to do of a deleted workspace's solutions, starting none after
   * `withinMs`. `latest`: the latest position among all of its solutions' deletions known to be in
   * the log, whoever wrote them: what the projection must reach before `delete_workspace` answers
   * (a deletion no longer listed was written over an hour ago). `failure`: why some were not
   * written (they are still to do), after writing every other. `unfinished`: the time ran out with
   * some still to do.
   */
  async drainWorkspace(
    workspaceId: string,
    withinMs = Infinity,
  ): Promise<{ latest: GlobalPosition | undefined; failure?: unknown; unfinished?: true }> {
    const deadline = performance.now() + withinMs;
    const { rows } = await this.pool.query<{
      solution_id: string;
      deleted_commit: string | null;
      deleted_prepare: string | null;
      done: boolean;
    }>('SELECT solution_id, deleted_commit, deleted_prepare, done_at IS NOT NULL AS done FROM cascade_pending WHERE workspace_id = $1', [
      workspaceId,
    ]);
    const positions: (GlobalPosition | undefined)[] = rows.map((row) =>
      row.deleted_commit === null || row.deleted_prepare === null
        ? undefined
        : { commit: BigInt(row.deleted_commit), prepare: BigInt(row.deleted_prepare) },
    );
    const toDo = rows.filter((row) => !row.done).map((row) => row.solution_id);
    // No time left: nothing is started, not even the read of the workspace's deletion.
    if (toDo.length > 0 && withinMs <= 0) return { latest: latestPosition(positions), unfinished: true };
    try {
      const left = await this.cascadeWorkspace(workspaceId, toDo, positions, deadline);
      return left > 0 ? { latest: latestPosition(positions), unfinished: true } : { latest: latestPosition(positions) };
    } catch (failure) {
      return { latest: latestPosition(positions), failure };
    }
  }

  /** How many solutions are waiting for their own SolutionDeleted (the backlog the worker drains). */
  async pendingCount(): Promise<number> {
    const { rows } = await this.pool.query<{ pending: number }>(
      'SELECT count(*)::int AS pending FROM cascade_pending WHERE done_at IS NULL',
    );
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
        // Closed meanwhile: what is left stays listed for the next start, whose first pass takes it.
        if (this.closed) return;
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

  /**
   * One pass over the list, in key order. A workspace whose cascade fails does not hold back the
   * ones after it (a solution stream that keeps refusing would otherwise stop every later
   * cascade for good): the pass goes on past it and fails at its end, to be retried.
   */
  private async drainPass(): Promise<void> {
    await this.pool.query(`DELETE FROM cascade_pending WHERE done_at < now() - interval '${doneKeptFor}'`);
    const failed = new Set<string>();
    let firstFailure: unknown;
    let after = { workspaceId: '', solutionId: '' };
    while (!this.closed) {
      const { rows } = await this.pool.query<{ solution_id: string; workspace_id: string }>(
        `SELECT solution_id, workspace_id FROM cascade_pending
         WHERE done_at IS NULL AND (workspace_id, solution_id) > ($1, $2) ORDER BY workspace_id, solution_id LIMIT $3`,
        [after.workspaceId, after.solutionId, drainPage],
      );
      const byWorkspace = new Map<string, string[]>();
      for (const row of rows) {
        const solutionIds = byWorkspace.get(row.workspace_id);
        if (solutionIds) solutionIds.push(row.solution_id);
        else byWorkspace.set(row.workspace_id, [row.solution_id]);
      }
      for (const [workspaceId, solutionIds] of byWorkspace) {
        if (this.closed) break;
        try {
          await this.cascadeWorkspace(workspaceId, solutionIds, []);
        } catch (error) {
          failed.add(workspaceId);
          firstFailure ??= error;
          this.logger.warn({ err: messageOf(error), workspaceId }, 'cascade deletion failed; going on with the other workspaces');
        }
      }
      if (rows.length < drainPage) break;
      const last = rows[rows.length - 1]!;
      after = { workspaceId: last.workspace_id, solutionId: last.solution_id };
    }
    if (failed.size > 0) throw new Error(`${failed.size} workspace(s) not fully cascaded, the first: ${messageOf(firstFailure)}`);
  }

  /**
   * Writes the deletions of `solutionIds`, listing each as written, and adds each one's position
   * to `positions`; starts none after `deadline` (on the monotonic clock), and answers how many are
   * left. A failed one does not stop the others: it fails the whole once they are done.
   */
  private async cascadeWorkspace(
    workspaceId: string,
    solutionIds: string[],
    positions: (GlobalPosition | undefined)[],
    deadline = Infinity,
  ): Promise<number> {
    if (solutionIds.length === 0) return 0;
    const deletion = (await readRecord(this.store, workspaceStream(workspaceId))).events
      .map((logged) => logged.event)
      .find((event) => event.type === 'WorkspaceDeleted');
    if (!deletion) {
      this.logger.error({ workspaceId, solutionIds }, 'cascade pending for a workspace that is not deleted; dropped');
      await this.pool.query('DELETE FROM cascade_pending WHERE solution_id = ANY($1)', [solutionIds]);
      return 0;
    }
    const context: CommandContext = {
      actor: deletion.metadata.actor,
      requestId: deletion.metadata.request_id,
      now: deletion.metadata.occurred_at,
    };
    const queue = [...solutionIds];
    const worker = async () => {
      for (let solutionId = this.next(queue, deadline); solutionId !== undefined; solutionId = this.next(queue, deadline)) {
        const position = await this.cascadeSolution(solutionId, context);
        positions.push(position);
        await this.pool.query(
          'UPDATE cascade_pending SET deleted_commit = $2, deleted_prepare = $3, done_at = now() WHERE solution_id = $1',
          [solutionId, position?.commit.toString() ?? null, position?.prepare.toString() ?? null],
        );
      }
    };
    const workers = await Promise.allSettled(Array.from({ length: Math.min(parallelAppends, solutionIds.length) }, worker));
    const failed = workers.find((outcome) => outcome.status === 'rejected');
    if (failed) throw failed.reason;
    return queue.length;
  }

  /**
   * The next solution of `queue` to delete, unless `deadline` has passed or the worker is closing:
   * a stop waits for the deletions being written, not for a whole pass (they stay listed for the next start).
   */
  private next(queue: string[], deadline: number): string | undefined {
    return !this.closed && performance.now() < deadline ? queue.pop() : undefined;
  }

  /**
   * Writes one solution's deletion; its position in the log, whoever wrote it (another pass or
   * instance may have been first: then the deletion is the stream's last event, as nothing follows
   * it; an EventStoreDB server older than 22.6 gives a stream's events no position, and its start
   * of the log is then all there is to wait for).
   */
  private async cascadeSolution(solutionId: string, context: CommandContext): Promise<GlobalPosition | undefined> {
    const stream = solutionStream(solutionId);
    const outcome = await execute(
      this.store,
      stream,
      solutionDecider,
      { requestId: context.requestId },
      () => ({
        type: 'CascadeDeleteSolution' as const,
        id: solutionId,
        context,
      }),
      { observer: this.observer },
    );
    if (outcome.position) return outcome.position;
    const [last] = await this.store.readStream(stream, { direction: 'backwards', limit: 1 });
    return last?.position;
  }
}

const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));
