/**
 * Seeded histories for the benches that need a long log (bench:rebuild, bench:catch-up): a
 * generator of valid ones (creates, updates and deletes of workspaces and solutions, workspace
 * deletions with their cascades; decided by the real deciders), the same history for the same
 * length, each event with its hashes as the service appends it (contract §16), and its writing into either store: straight into PostgreSQL's es_events/es_streams in big
 * transactions, or appended to EventStoreDB through the service's adapter.
 *
 * Its choices are O(1) (test/support/generate.ts scans every record per choice, too slow for a
 * million events).
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { comparePositions, type EventStore, type GlobalPosition } from '../src/eventstore/port.js';
import { solutionStream, workspaceStream } from '../src/eventstore/stream-names.js';
import type { CommandContext } from '../src/domain/command.js';
import type { Envelope } from '../src/domain/events.js';
import { decideSolution, evolveSolution, initialSolutionState, type SolutionState } from '../src/domain/solution.js';
import { fromMicros } from '../src/domain/timestamp.js';
import { hashEvent, zeroHash } from '../src/integrity/hashes.js';
import { decideWorkspace, evolveWorkspace, initialWorkspaceState, type WorkspaceState } from '../src/domain/workspace.js';
import { seededRandom } from '../test/support/generate.js';

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

type Bag<T> = { items: T[]; index: Map<T, number> };
const bag = <T>(): Bag<T> => ({ items: [], index: new Map() });
const add = <T>(b: Bag<T>, item: T) => {
  b.index.set(item, b.items.length);
  b.items.push(item);
};
const remove = <T>(b: Bag<T>, item: T) => {
  const at = b.index.get(item);
  if (at === undefined) return;
  const last = b.items.pop()!;
  if (last !== item) {
    b.items[at] = last;
    b.index.set(last, at);
  }
  b.index.delete(item);
};

/** One event of a generated history, in its stream (versions from 1), in the order the history made it. */
export type HistoryEvent = { stream: string; version: number; type: string; data: unknown; metadata: unknown };

/** A history command by command, the same on every run (a fixed seed): `next()` decides the next command's events. */
export class HistoryGenerator {
  private readonly random = seededRandom(20_240_601);
  private tick = 1_700_000_000_000_000n;
  private counter = 0;
  private readonly workspaces = new Map<string, { state: WorkspaceState; version: number; solutions: Bag<string> }>();
  private readonly solutions = new Map<string, { state: SolutionState; version: number; workspaceId: string }>();
  private readonly activeWorkspaces = bag<string>();
  private readonly activeSolutions = bag<string>();
  readonly streams = new Map<string, number>();
  /** Each stream's last hash: events carry their hashes (contract §16) as the service appends them. */
  private readonly lastHashes = new Map<string, string>();

  /** `organizations`: how many the workspaces are spread over, evenly at random (bench:audit puts a whole log in one). */
  constructor(private readonly organizations = 100) {}

  private context(): CommandContext {
    this.tick += 13n;
    return { actor: `user-${Math.floor(this.random() * 50)}`, requestId: randomUUID(), now: fromMicros(this.tick) };
  }

  private pick(b: Bag<string>): string {
    return b.items[Math.floor(this.random() * b.items.length)]!;
  }

  private row(stream: string, event: Envelope): HistoryEvent {
    const version = (this.streams.get(stream) ?? 0) + 1;
    this.streams.set(stream, version);
    const hashes = hashEvent(
      { type: event.type, data: event.data, metadata: event.metadata, streamName: stream, version: BigInt(version) },
      this.lastHashes.get(stream) ?? zeroHash,
    );
    this.lastHashes.set(stream, hashes.hash);
    return { stream, version, type: event.type, data: event.data, metadata: { ...event.metadata, ...hashes } };
  }

  /** The events of one command (a workspace deletion brings its solutions' cascade deletions). */
  next(): HistoryEvent[] {
    const roll = this.random();
    if (this.activeWorkspaces.items.length < 20 || roll < 0.14) return this.createWorkspace();
    if (roll < 0.42) return this.createSolution(this.pick(this.activeWorkspaces));
    if (roll < 0.74 && this.activeSolutions.items.length > 0) {
      const id = this.pick(this.activeSolutions);
      return this.random() < 0.88 ? this.updateSolution(id) : this.deleteSolution(id, 'DeleteSolution');
    }
    const id = this.pick(this.activeWorkspaces);
    return roll < 0.975 ? this.updateWorkspace(id) : this.deleteWorkspace(id);
  }

  private workspaceEvents(id: string, events: Envelope[]): HistoryEvent[] {
    const entry = this.workspaces.get(id)!;
    entry.state = events.reduce((s, e) => evolveWorkspace(s, e as never), entry.state);
    return events.map((event) => this.row(workspaceStream(id), event));
  }

  private solutionEvents(id: string, events: Envelope[]): HistoryEvent[] {
    const entry = this.solutions.get(id)!;
    entry.state = events.reduce((s, e) => evolveSolution(s, e as never), entry.state);
    return events.map((event) => this.row(solutionStream(id), event));
  }

  private createWorkspace(): HistoryEvent[] {
    const id = `ws_bench${(this.counter++).toString(36).padStart(16, '0')}`;
    this.workspaces.set(id, { state: initialWorkspaceState, version: 0, solutions: bag() });
    add(this.activeWorkspaces, id);
    const organizationId = `org_bench${Math.floor(this.random() * this.organizations)}`;
    const events = decideWorkspace(
      {
        type: 'CreateWorkspace',
        id,
        organizationId,
        name: `workspace ${this.counter}`,
        description: 'seeded',
        attributes: { tier: this.counter % 3 },
        context: this.context(),
      },
      initialWorkspaceState,
    );
    return this.workspaceEvents(id, events);
  }

  private updateWorkspace(id: string): HistoryEvent[] {
    const entry = this.workspaces.get(id)!;
    const events = decideWorkspace(
      { type: 'UpdateWorkspace', id, name: `renamed ${this.counter++}`, attributes: { k: { v: this.counter } }, context: this.context() },
      entry.state,
    );
    return this.workspaceEvents(id, events);
  }

  private deleteWorkspace(id: string): HistoryEvent[] {
    const entry = this.workspaces.get(id)!;
    const context = this.context();
    const rows = this.workspaceEvents(id, decideWorkspace({ type: 'DeleteWorkspace', id, context }, entry.state));
    remove(this.activeWorkspaces, id);
    // The cascade worker's deletions, with the workspace deletion's actor, request and time.
    for (const solutionId of [...entry.solutions.items]) rows.push(...this.deleteSolution(solutionId, 'CascadeDeleteSolution', context));
    return rows;
  }

  private createSolution(workspaceId: string): HistoryEvent[] {
    const workspace = this.workspaces.get(workspaceId)!;
    if (workspace.state.status !== 'active') throw new Error('unreachable');
    const id = `sol_bench${(this.counter++).toString(36).padStart(16, '0')}`;
    this.solutions.set(id, { state: initialSolutionState, version: 0, workspaceId });
    add(this.activeSolutions, id);
    add(workspace.solutions, id);
    const { organization_id } = workspace.state.workspace;
    const events = decideSolution(
      {
        type: 'CreateSolution',
        id,
        workspace: { id: workspaceId, organization_id },
        name: `solution ${this.counter}`,
        description: 'seeded',
        attributes: { a: this.counter },
        context: this.context(),
      },
      initialSolutionState,
    );
    return this.solutionEvents(id, events);
  }

  private updateSolution(id: string): HistoryEvent[] {
    const entry = this.solutions.get(id)!;
    const events = decideSolution(
      { type: 'UpdateSolution', id, name: `s${this.counter++}`, attributes: { n: this.counter }, context: this.context() },
      entry.state,
    );
    return this.solutionEvents(id, events);
  }

  private deleteSolution(id: string, type: 'DeleteSolution' | 'CascadeDeleteSolution', context = this.context()): HistoryEvent[] {
    const entry = this.solutions.get(id)!;
    remove(this.activeSolutions, id);
    remove(this.workspaces.get(entry.workspaceId)!.solutions, id);
    return this.solutionEvents(id, decideSolution({ type, id, context }, entry.state));
  }
}

/** What a seeding wrote, and how long it took. */
export type Seeded = { events: number; streams: number; seconds: number };

const showProgress = (written: number, count: number) => {
  if (process.stderr.isTTY) process.stderr.write(`\rseeding: ${integer.format(written)}/${integer.format(count)} events`);
};
const endProgress = () => {
  if (process.stderr.isTTY) process.stderr.write('\n');
};

/**
 * Writes a history of at least `count` events (whole commands) in `organizations` organizations
 * straight into an empty es_events and es_streams, 20,000 events per statement; then vacuums them.
 */
export async function seedPostgresLog(client: pg.Client, count: number, organizations?: number): Promise<Seeded> {
  const generator = new HistoryGenerator(organizations);
  // Event ids in insertion order (a random prefix per run, then a counter): the unique index on
  // them then grows at its end instead of taking every insert at a random place.
  const runPrefix = `${randomUUID().slice(0, 24)}`;
  const started = performance.now();
  let written = 0;
  let pending: HistoryEvent[] = [];
  const flush = async () => {
    if (pending.length === 0) return;
    await client.query(
      `INSERT INTO es_events (stream_name, version, event_id, type, data, metadata)
       SELECT s, v, (prefix || lpad(to_hex(n), 12, '0'))::uuid, t, d::jsonb, m::jsonb
       FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS u(s, v, t, d, m, i),
         LATERAL (SELECT $6::bigint + i AS n, $7::text AS prefix) AS id`,
      [
        pending.map((r) => r.stream),
        pending.map((r) => r.version),
        pending.map((r) => r.type),
        pending.map((r) => JSON.stringify(r.data)),
        pending.map((r) => JSON.stringify(r.metadata)),
        written,
        runPrefix,
      ],
    );
    written += pending.length;
    pending = [];
    showProgress(written, count);
  };
  await client.query('SET synchronous_commit = off');
  while (written + pending.length < count) {
    // Rows stay in command order; each flush is its own transaction, so global order is kept.
    pending.push(...generator.next());
    if (pending.length >= 20_000) await flush();
  }
  await flush();
  const streams = [...generator.streams];
  for (let i = 0; i < streams.length; i += 50_000) {
    const chunk = streams.slice(i, i + 50_000);
    await client.query('INSERT INTO es_streams (stream_name, version) SELECT * FROM unnest($1::text[], $2::bigint[])', [
      chunk.map(([name]) => name),
      chunk.map(([, version]) => version),
    ]);
  }
  // As a log that has been around for a while is: vacuumed (hint bits set, visibility map), so
  // that a bench does not pay for the seeding's aftermath, nor compete with autovacuum over it.
  await client.query('VACUUM (ANALYZE) es_events, es_streams');
  endProgress();
  return { events: written, streams: streams.length, seconds: (performance.now() - started) / 1000 };
}

/**
 * Appends on their way at once while seeding EventStoreDB: enough to keep the stream busy (64 and
 * 1,024 seeded the stand-in as fast), few enough for each to be answered within the adapter's timeout.
 */
export const appendsInFlight = 256;

/**
 * Appends a history of at least `count` events (whole commands) to an empty EventStoreDB through
 * `store` (the service's adapter, so the events are stored as the service stores them): each run
 * of a command's events in one stream is one append at its exact expected version, sent without
 * waiting for the appends before it (but the first). The client sends every append on one
 * BatchAppend stream, in the order they are made, and the node writes them in the order they
 * arrive; should they land in another order, the log would not be this history, so each append's
 * position is checked against the one made before it. Answers also with the log's end: the last
 * event's position.
 */
export async function seedEventStoreDB(store: EventStore, count: number): Promise<Seeded & { appends: number; end: GlobalPosition }> {
  const generator = new HistoryGenerator();
  const started = performance.now();
  /** Where each append's last event landed, in the order the appends were made. */
  const positions: GlobalPosition[] = [];
  let made = 0;
  let written = 0;
  let inFlight = 0;
  let slotFreed: (() => void) | undefined;
  let failure: unknown;
  const append = (run: HistoryEvent[]) => {
    const index = made++;
    const first = run[0]!;
    inFlight += 1;
    store
      .append(
        first.stream,
        BigInt(first.version - 1),
        run.map((event) => ({ id: randomUUID(), type: event.type, data: event.data, metadata: event.metadata })),
      )
      .then(
        (result) => {
          positions[index] = result.position;
        },
        (error: unknown) => {
          failure ??= error;
        },
      )
      .finally(() => {
        inFlight -= 1;
        slotFreed?.();
      });
  };
  const slot = () => new Promise<void>((resolve) => (slotFreed = resolve));
  while (written < count && failure === undefined) {
    const events = generator.next();
    for (let start = 0; start < events.length;) {
      let end = start + 1;
      while (end < events.length && events[end]!.stream === events[start]!.stream) end += 1;
      // The first append alone: it connects and opens the BatchAppend stream, and appends made
      // meanwhile would take a shorter way through the client's start-up and pass it.
      const limit = made === 1 ? 1 : appendsInFlight;
      while (inFlight >= limit) await slot();
      append(events.slice(start, end));
      start = end;
    }
    const before = written;
    written += events.length;
    if (Math.floor(written / 20_000) > Math.floor(before / 20_000)) showProgress(written, count);
  }
  while (inFlight > 0) await slot();
  endProgress();
  if (failure !== undefined) throw failure;
  for (let i = 1; i < positions.length; i++) {
    if (comparePositions(positions[i]!, positions[i - 1]!) <= 0) {
      throw new Error(`append ${i} landed before append ${i - 1}: the log is not the generated history`);
    }
  }
  return {
    events: written,
    streams: generator.streams.size,
    seconds: (performance.now() - started) / 1000,
    appends: positions.length,
    end: positions[positions.length - 1]!,
  };
}
