import { randomUUID } from 'node:crypto';
import type { NewEvent } from '../../src/eventstore/port.js';
import { solutionStream, workspaceStream } from '../../src/eventstore/stream-names.js';
import type { Envelope } from '../../src/domain/events.js';
import { decideSolution, evolveSolution, initialSolutionState, type SolutionState } from '../../src/domain/solution.js';
import { fromMicros } from '../../src/domain/timestamp.js';
import { decideWorkspace, evolveWorkspace, initialWorkspaceState, type WorkspaceState } from '../../src/domain/workspace.js';

let tick = 1_700_000_000_000_000n;
const context = (actor: string) => ({ actor, requestId: randomUUID(), now: fromMicros((tick += 7n)) });

export type PlannedAppend = { streamName: string; expectedVersion: bigint; events: NewEvent[] };

const toNew = (events: Envelope[]): NewEvent[] =>
  events.map((event) => ({ id: randomUUID(), type: event.type, data: event.data, metadata: event.metadata }));

/**
 * A writer's own records and the valid appends that change them: creates, updates and deletes of
 * workspaces and solutions, decided by the real deciders, so every stream folds cleanly.
 */
export class RecordWriter {
  private readonly workspaces = new Map<string, { state: WorkspaceState; version: bigint }>();
  private readonly solutions = new Map<string, { state: SolutionState; version: bigint }>();
  private counter = 0;

  constructor(
    private readonly name: string,
    private readonly organizationId: string,
    private readonly random: () => number = Math.random,
  ) {}

  /** The next append, chosen at random; apply it with `applied` once it is stored. */
  next(): PlannedAppend & { applied: () => void } {
    const active = [...this.workspaces].filter(([, w]) => w.state.status === 'active');
    const liveSolutions = [...this.solutions].filter(([, s]) => s.state.status === 'active');
    const roll = this.random();
    if (active.length === 0 || roll < 0.2) return this.createWorkspace();
    if (roll < 0.5) return this.createSolution(active[Math.floor(this.random() * active.length)]![1]);
    if (roll < 0.75 && liveSolutions.length > 0) {
      const [id, entry] = liveSolutions[Math.floor(this.random() * liveSolutions.length)]!;
      const command =
        this.random() < 0.8
          ? {
              type: 'UpdateSolution' as const,
              id,
              name: `s${this.counter++}`,
              // A key of several: what a fold over a stale state would lose shows.
              attributes: { n: this.counter, [`s${this.counter % 7}`]: this.counter },
              context: context(this.name),
            }
          : { type: 'DeleteSolution' as const, id, context: context(this.name) };
      return this.solutionAppend(id, entry, decideSolution(command, entry.state));
    }
    const [id, entry] = active[Math.floor(this.random() * active.length)]!;
    const command =
      roll < 0.95
        ? {
            type: 'UpdateWorkspace' as const,
            id,
            name: `w${this.counter++}`,
            attributes: { k: { v: this.counter }, [`w${this.counter % 7}`]: this.counter },
            context: context(this.name),
          }
        : { type: 'DeleteWorkspace' as const, id, context: context(this.name) };
    return this.workspaceAppend(id, entry, decideWorkspace(command, entry.state));
  }

  private createWorkspace() {
    const id = `ws_${this.name}_${this.counter++}`;
    const entry = { state: initialWorkspaceState, version: 0n };
    this.workspaces.set(id, entry);
    const events = decideWorkspace(
      { type: 'CreateWorkspace', id, organizationId: this.organizationId, name: id, context: context(this.name) },
      entry.state,
    );
    return this.workspaceAppend(id, entry, events);
  }

  private createSolution(workspace: { state: WorkspaceState }) {
    if (workspace.state.status !== 'active') throw new Error('unreachable');
    const id = `sol_${this.name}_${this.counter++}`;
    const entry = { state: initialSolutionState, version: 0n };
    this.solutions.set(id, entry);
    const { id: workspaceId, organization_id } = workspace.state.workspace;
    const events = decideSolution(
      { type: 'CreateSolution', id, workspace: { id: workspaceId, organization_id }, name: id, context: context(this.name) },
      entry.state,
    );
    return this.solutionAppend(id, entry, events);
  }

  private workspaceAppend(id: string, entry: { state: WorkspaceState; version: bigint }, events: Envelope[]) {
    return {
      streamName: workspaceStream(id),
      expectedVersion: entry.version,
      events: toNew(events),
      applied: () => {
        entry.state = events.reduce((s, e) => evolveWorkspace(s, e as never), entry.state);
        entry.version += BigInt(events.length);
      },
    };
  }

  private solutionAppend(id: string, entry: { state: SolutionState; version: bigint }, events: Envelope[]) {
    return {
      streamName: solutionStream(id),
      expectedVersion: entry.version,
      events: toNew(events),
      applied: () => {
        entry.state = events.reduce((s, e) => evolveSolution(s, e as never), entry.state);
        entry.version += BigInt(events.length);
      },
    };
  }
}

/** A small deterministic generator, so a failing run can be repeated with its seed. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A backlog for the projector: `records` workspaces of `organizationId`, each created and then
 * updated until its stream holds `eventsPerRecord` events, one append per record.
 */
export function workspaceHistories(name: string, organizationId: string, records: number, eventsPerRecord: number): PlannedAppend[] {
  return Array.from({ length: records }, (_, record) => {
    const id = `ws_${name}_${record}`;
    let state = initialWorkspaceState;
    const events: Envelope[] = [];
    const decide = (command: Parameters<typeof decideWorkspace>[0]) => {
      const decided = decideWorkspace(command, state);
      state = decided.reduce((s, e) => evolveWorkspace(s, e as never), state);
      events.push(...decided);
    };
    decide({ type: 'CreateWorkspace', id, organizationId, name: id, context: context(name) });
    for (let update = 1; update < eventsPerRecord; update++) {
      decide({ type: 'UpdateWorkspace', id, name: `${id} ${update}`, attributes: { update }, context: context(name) });
    }
    return { streamName: workspaceStream(id), expectedVersion: 0n, events: toNew(events) };
  });
}
