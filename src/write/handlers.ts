import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { notFound, organizationNotGranted, RetryLater } from '../errors.js';
import { comparePositions, encodePosition, latestPosition, type EventStore, type GlobalPosition } from '../eventstore/port.js';
import { solutionStream, workspaceStream } from '../eventstore/stream-names.js';
import type { CascadeWorker } from './cascade.js';
import type { CommandContext } from '../domain/command.js';
import { solutionDecider, workspaceDecider, type Decider } from '../domain/deciders.js';
import { CreationOrder } from './creation-order.js';
import { RecentStates } from './recent-states.js';
import type { DomainEvent } from '../domain/events.js';
import { loadState, runGroup, timed, type CommandJob, type CommandObserver, type Outcome } from './execute.js';
import { RecordPace } from './record-pace.js';
import { RecordQueueFull, RecordQueues } from './record-queue.js';
import { Turns } from './turns.js';
import type { SnapshotStore } from './snapshots.js';
import type { CommandIndex } from './command-index.js';
import type { JsonObject } from '../domain/merge-patch.js';
import type { Solution, SolutionState } from '../domain/solution.js';
import type { Timestamp } from '../domain/timestamp.js';
import type { Documentation } from '../domain/values.js';
import type { Workspace } from '../domain/workspace.js';

/** Who is calling: the token's subject and the organizations it grants (contract §3). */
export type Caller = {
  subject: string;
  organizations: ReadonlySet<string>;
  requestId: string;
  /**
   * With an Idempotency-Key: the id of this caller's keyed request. The command's events carry it,
   * so a retry answers what was done instead of doing it again, and new record ids derive from it.
   */
  commandId?: string;
  /** Told when the command answers before the projection has applied its events (the API says so in a header). */
  onProjectionBehind?: () => void;
};

/**
 * Whether `caller` may be answered about a solution a keyed command of theirs already changed:
 * access to its organization, as for any record, whatever became of its workspace since.
 */
const solutionSeenBy =
  (caller: Caller, what: 'workspace' | 'solution') =>
  (state: SolutionState): void => {
    if (state.status !== 'absent' && !caller.organizations.has(state.solution.organization_id)) throw notFound(what);
  };

/** An outcome as a handler sees it: `beforeProjection` when its events were appended now, yet at or before the projection's position as read before (CommandHandlerDeps.projectedPosition). */
type Submitted<State> = Outcome<State> & { beforeProjection: boolean };

export type CommandHandlerDeps = {
  store: EventStore;
  cascade: CascadeWorker;
  clock: () => Timestamp;
  newId: (prefix: 'ws_' | 'sol_', seed?: string) => string;
  /**
   * Resolves once the projection has applied `position`, or after `timeoutMs` (contract §11), or
   * at once while the projector is stopped at a dead letter; with `false` when it was not applied.
   */
  awaitProjection: (position: GlobalPosition, timeoutMs: number) => Promise<boolean | void>;
  /**
   * How far the projection has applied the log, as this instance knows it. Events appended after
   * it was read lie past it in the log the projection reads; events placed at or before it are in
   * another log (the event store was replaced or emptied under the read database), and will never
   * be projected.
   */
  projectedPosition?: () => GlobalPosition;
  /** All a command may wait, in total, after its events are stored (PROJECTION_WAIT_MS). */
  projectionWaitMs: number;
  logger: Logger;
  /** Told of each version conflict a command runs into and of each step's duration (metrics). */
  observer?: CommandObserver;
  /** Commands that may wait their turn on one record (RECORD_QUEUE_LIMIT, contract §7). */
  recordQueueLimit: number;
  /** Commands per second one record may take here; beyond, they wait in its queue (RECORD_RATE_LIMIT; 0 or absent: no limit). */
  recordRateLimit?: number;
  /** Where records' snapshots are kept; without, a record not in memory is read from its first event. */
  snapshots?: SnapshotStore;
  /** Where keyed commands' events are indexed; without, a keyed command reads its record's whole stream. */
  commandIndex?: CommandIndex;
  /** Appends without hashes: the bench-only baseline (src/write/execute.ts, ExecuteOptions). */
  withoutHashes?: boolean;
};

/** When it was queued: the wait for its turn (the groups of its record before its own) is a step of its own (metrics). */
type QueuedJob = CommandJob<unknown, unknown, DomainEvent> & { queuedAt: number };

/** The most commands of one record decided and appended together. */
const maxCommandsPerGroup = 64;

/** The commands a record over its rate may still send at once, as a share of its rate: a tenth of a second's worth. */
const recordBurstSeconds = 0.1;

/**
 * How long after a group of several commands a record's next group may wait for as many (see
 * RecordQueues' gathering): longer than concurrent writers take to be answered and send their
 * next command, short against what each of them waits in a storm anyway.
 */
const recordGatherMs = 10;

/** What a command refused for a full queue is told to wait: a group takes milliseconds, so the queue has moved on by then. */
const queueFullRetryAfterSeconds = 1;

export type CreateWorkspaceParams = {
  organization_id: string;
  name: string;
  description?: string | undefined;
  attributes?: JsonObject | undefined;
};
export type UpdateWorkspaceParams = { id: string; name: string; description?: string | undefined; attributes?: JsonObject | undefined };
export type CreateSolutionParams = {
  workspace_id: string;
  organization_id?: string | undefined;
  name: string;
  description?: string | undefined;
  attributes?: JsonObject | undefined;
  documentation?: Documentation | undefined;
};
export type UpdateSolutionParams = {
  id: string;
  name: string;
  description?: string | undefined;
  attributes?: JsonObject | undefined;
  documentation?: Documentation | undefined;
};

/**
 * What one command may still wait, across every wait it chains (earlier creations, the
 * projection): contract §11 bounds the total by PROJECTION_WAIT_MS.
 */
class WaitBudget {
  constructor(private remainingMs: number) {}

  async spend<T>(wait: (timeoutMs: number) => Promise<T>): Promise<T> {
    const started = performance.now();
    try {
      return await wait(this.remainingMs);
    } finally {
      this.remainingMs = Math.max(0, this.remainingMs - (performance.now() - started));
    }
  }
}

/**
 * The write side's entry points: each loads a record's stream, decides, appends, and answers once
 * the projection has applied the result. Records of organizations the caller cannot access are
 * reported exactly like missing ones.
 */
export class CommandHandlers {
  private readonly creationOrder = new CreationOrder();
  private readonly recent = new RecentStates();
  private readonly turns = new Turns();
  private readonly queues: RecordQueues<QueuedJob>;

  constructor(private readonly deps: CommandHandlerDeps) {
    this.queues = new RecordQueues<QueuedJob>({
      limit: deps.recordQueueLimit,
      maxGroup: maxCommandsPerGroup,
      pacing: deps.recordRateLimit
        ? {
            pace: new RecordPace(deps.recordRateLimit, Math.max(1, deps.recordRateLimit * recordBurstSeconds), () => performance.now()),
            wait: sleep,
          }
        : undefined,
      gathering: { withinMs: recordGatherMs, now: () => performance.now(), wait: sleep },
      runGroup: (streamName, jobs) => {
        const started = performance.now();
        for (const job of jobs) deps.observer?.onStep?.('wait_turn', (started - job.queuedAt) / 1000);
        return runGroup(deps.store, streamName, jobs, {
          observer: deps.observer,
          recent: this.recent,
          snapshots: deps.snapshots,
          commandIndex: deps.commandIndex,
          withoutHashes: deps.withoutHashes,
        });
      },
    });
  }

  async createWorkspace(params: CreateWorkspaceParams, caller: Caller): Promise<Workspace> {
    if (!caller.organizations.has(params.organization_id)) {
      throw organizationNotGranted();
    }
    const id = this.deps.newId('ws_', caller.commandId);
    const outcome = await this.createInOrder(workspaceStream(id), workspaceDecider, caller, (context) => ({
      type: 'CreateWorkspace' as const,
      id,
      organizationId: params.organization_id,
      name: params.name,
      description: params.description,
      attributes: params.attributes,
      context,
    }));
    return this.settled(outcome.state, (state) => (state.status === 'active' ? state.workspace : undefined));
  }

  async updateWorkspace(params: UpdateWorkspaceParams, caller: Caller): Promise<Workspace> {
    const outcome = await this.submit(workspaceStream(params.id), workspaceDecider, caller, (state) => {
      if (state.status === 'active' && !caller.organizations.has(state.workspace.organization_id)) throw notFound('workspace');
      return { type: 'UpdateWorkspace' as const, ...params, context: this.context(caller) };
    });
    await this.awaitProjection(caller, outcome);
    return this.settled(outcome.state, (state) => (state.status === 'active' ? state.workspace : undefined));
  }

  async deleteWorkspace(id: string, caller: Caller): Promise<{ id: string }> {
    const outcome = await this.submit(workspaceStream(id), workspaceDecider, caller, (state) => {
      if (state.status === 'active' && !caller.organizations.has(state.workspace.organization_id)) throw notFound('workspace');
      return { type: 'DeleteWorkspace' as const, id, context: this.context(caller) };
    });
    const budget = new WaitBudget(this.deps.projectionWaitMs);
    const projected = await budget.spend((timeoutMs) => this.awaitProjection(caller, outcome, outcome.position, timeoutMs));
    // The solutions are already hidden; their own deletion events are written before answering,
    // within what is left of the budget, or, if that fails or runs out, in the background: the
    // deletion itself is durable and is not reported as failed.
    const cascade = await budget.spend((withinMs) =>
      this.deps.cascade.drainWorkspace(id, withinMs).catch((failure: unknown) => ({ latest: undefined, failure, unfinished: undefined })),
    );
    if (cascade.failure !== undefined) {
      this.deps.logger.warn({ err: (cascade.failure as Error).message, workspaceId: id }, 'cascade deferred to the background');
    }
    if (cascade.failure !== undefined || cascade.unfinished) {
      // Some solutions' deletions are not written yet: the change feed does not show them when it answers.
      caller.onProjectionBehind?.();
      this.deps.cascade.drainAll();
    }
    // The answer acknowledges the deletions in the log too: the change feed shows them once it is
    // received (contract §14). Within what is left of the one wait a command has (§11); a
    // projection already found behind has said so.
    const cascaded = cascade.latest;
    if (projected && cascaded && !cascade.unfinished)
      await budget.spend((timeoutMs) => this.awaitProjection(caller, outcome, cascaded, timeoutMs));
    return { id };
  }

  async createSolution(params: CreateSolutionParams, caller: Caller): Promise<Solution> {
    const id = this.deps.newId('sol_', caller.commandId);
    // The workspace is checked as the command is decided, which a keyed retry of a creation that ran skips.
    const outcome = await this.createInOrder(
      solutionStream(id),
      solutionDecider,
      caller,
      async (context) => {
        const workspace = await this.activeWorkspace(params.workspace_id, caller);
        return {
          type: 'CreateSolution' as const,
          id,
          workspace: { id: workspace.id, organization_id: workspace.organization_id },
          organizationId: params.organization_id,
          name: params.name,
          description: params.description,
          attributes: params.attributes,
          documentation: params.documentation,
          context,
        };
      },
      solutionSeenBy(caller, 'workspace'),
    );
    return this.settled(outcome.state, (state) => (state.status === 'active' ? state.solution : undefined));
  }

  async updateSolution(params: UpdateSolutionParams, caller: Caller): Promise<Solution> {
    const outcome = await this.submit(
      solutionStream(params.id),
      solutionDecider,
      caller,
      async (state) => {
        if (state.status === 'active') await this.activeWorkspace(state.solution.workspace_id, caller, 'solution');
        return { type: 'UpdateSolution' as const, ...params, context: this.context(caller) };
      },
      { mayAnswerExecuted: solutionSeenBy(caller, 'solution') },
    );
    await this.awaitProjection(caller, outcome);
    return this.settled(outcome.state, (state) => (state.status === 'active' ? state.solution : undefined));
  }

  async deleteSolution(id: string, caller: Caller): Promise<{ id: string }> {
    const outcome = await this.submit(
      solutionStream(id),
      solutionDecider,
      caller,
      async (state) => {
        if (state.status === 'active') await this.activeWorkspace(state.solution.workspace_id, caller, 'solution');
        return { type: 'DeleteSolution' as const, id, context: this.context(caller) };
      },
      { mayAnswerExecuted: solutionSeenBy(caller, 'solution') },
    );
    await this.awaitProjection(caller, outcome);
    return { id };
  }

  /** The workspace if it is active and the caller may access it; otherwise `what` is not found. */
  private async activeWorkspace(workspaceId: string, caller: Caller, what = 'workspace'): Promise<Workspace> {
    const { state } = await loadState(this.deps.store, workspaceStream(workspaceId), workspaceDecider, this.deps.snapshots);
    if (state.status !== 'active' || !caller.organizations.has(state.workspace.organization_id)) throw notFound(what);
    return state.workspace;
  }

  /**
   * Creates a record and answers once it, and every creation of this instance that took an earlier
   * time, is projected: lists never show a record after a later one was acknowledged (contract §9).
   */
  private async createInOrder<Command, State, Event extends DomainEvent>(
    streamName: string,
    decider: Decider<Command, State, Event>,
    caller: Caller,
    command: (context: CommandContext) => Command | Promise<Command>,
    mayAnswerExecuted?: (state: State) => void,
  ): Promise<Submitted<State>> {
    const context = this.context(caller);
    // Without an Idempotency-Key the record's id is newly generated, and so is its stream.
    const appending = this.submit(streamName, decider, caller, () => command(context), {
      newStream: caller.commandId === undefined,
      mayAnswerExecuted,
    });
    const untrack = this.creationOrder.track(
      context.now,
      appending.then((outcome) => outcome.position),
    );
    try {
      const outcome = await appending;
      const budget = new WaitBudget(this.deps.projectionWaitMs);
      const earlier = await timed(this.deps.observer, 'wait_earlier_creations', () =>
        budget.spend((timeoutMs) => this.creationOrder.earlierAppended(context.now, timeoutMs)),
      );
      await budget.spend((timeoutMs) => this.awaitProjection(caller, outcome, latestPosition([outcome.position, earlier]), timeoutMs));
      return outcome;
    } finally {
      untrack();
    }
  }

  /**
   * Queues a command behind the others on its record (src/write/record-queue.ts): decided in its
   * turn, appended with those queued beside it. Refused with 429 when the record's queue is full.
   */
  private submit<Command, State, Event extends DomainEvent>(
    streamName: string,
    decider: Decider<Command, State, Event>,
    caller: Caller,
    commandFor: (state: State) => Command | Promise<Command>,
    { newStream = false, mayAnswerExecuted }: Pick<CommandJob<Command, State, Event>, 'mayAnswerExecuted'> & { newStream?: boolean } = {},
  ): Promise<Submitted<State>> {
    const projectedBefore = this.deps.projectedPosition?.();
    return new Promise<Submitted<State>>((resolve, reject) => {
      const job: CommandJob<Command, State, Event> & { queuedAt: number } = {
        decider,
        request: caller,
        commandFor,
        newStream,
        ...(mayAnswerExecuted ? { mayAnswerExecuted } : {}),
        resolve: (outcome) =>
          resolve({
            ...outcome,
            beforeProjection:
              outcome.appendedNow &&
              outcome.position !== undefined &&
              projectedBefore !== undefined &&
              comparePositions(outcome.position, projectedBefore) <= 0,
          }),
        fail: reject,
        queuedAt: performance.now(),
      };
      try {
        // The queue holds jobs of every kind of record; a group is one stream's, so of one kind.
        this.queues.enqueue(streamName, job as unknown as QueuedJob);
      } catch (error) {
        if (!(error instanceof RecordQueueFull)) throw error;
        reject(new RetryLater(`too many changes of this record are waiting (${error.waiting}); retry later`, queueFullRetryAfterSeconds));
      }
    });
  }

  private context(caller: Caller): CommandContext {
    return { actor: caller.subject, requestId: caller.requestId, now: this.deps.clock(), commandId: caller.commandId };
  }

  /** Waits for the projection to apply `position`: true once it has, false if it is behind (the caller told so). */
  private async awaitProjection(
    caller: Caller,
    outcome: Submitted<unknown>,
    position = outcome.position,
    timeoutMs = this.deps.projectionWaitMs,
  ): Promise<boolean> {
    if (!position) return true;
    if (outcome.beforeProjection) {
      // Stored (contract §11: answered as done), in a log the projection never reads: reads will not show it.
      this.deps.logger.error(
        { position: encodePosition(outcome.position!) },
        "a command's events were placed before the projection's checkpoint: the event store was replaced or emptied under the read database (see /readyz)",
      );
      caller.onProjectionBehind?.();
      return false;
    }
    const reached = await timed(this.deps.observer, 'wait_projection', () => this.deps.awaitProjection(position, timeoutMs));
    await this.turns.next();
    if (reached === false) caller.onProjectionBehind?.();
    return reached !== false;
  }

  private settled<State, Record>(state: State, record: (state: State) => Record | undefined): Record {
    const result = record(state);
    // A decider that accepted a command always leaves an active record: reaching this is a bug, logged and answered 500.
    if (!result) throw new Error('command left no active record');
    return result;
  }
}
