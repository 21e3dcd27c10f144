/**
 * npm run bench:rebuild [-- --events 1000000 --batch-size 20000 --cached-rows N --keep --database NAME --verify]
 *
 * Seeds a fresh database with `--events` valid events (creates, updates and deletes of workspaces
 * and solutions, workspace deletions with their cascades; decided by the real deciders, written
 * straight into es_events/es_streams in big transactions), then rebuilds the read tables from
 * them with the same code as `npm run projections:rebuild` and prints the rate.
 *
 * PostgreSQL: DATABASE_URL's server when set, else the embedded one on DATA_DIR (default: a
 * directory under the system's temporary directory, kept between runs). The seeded database is
 * dropped afterwards unless --keep; --database NAME reuses (or creates and seeds) a named one.
 * --verify folds every stream afterwards and compares it with the rebuilt tables.
 */
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { pino } from 'pino';
import { solutionStream, workspaceStream } from '../src/eventstore/stream-names.js';
import { startEmbeddedPostgres } from '../src/infra/embedded-postgres.js';
import { databaseUrl as databaseUrlOn } from './databases.js';
import { parseConfig } from '../src/config.js';
import { rebuildReadModel } from '../src/projections/rebuild/index.js';
import { openStores } from '../src/runtime/stores.js';
import { actualReadModel, compareReadModels, expectedReadModel } from '../src/projections/verify.js';
import type { CommandContext } from '../src/domain/command.js';
import type { Envelope } from '../src/domain/events.js';
import { decideSolution, evolveSolution, initialSolutionState, type SolutionState } from '../src/domain/solution.js';
import { fromMicros } from '../src/domain/timestamp.js';
import { decideWorkspace, evolveWorkspace, initialWorkspaceState, type WorkspaceState } from '../src/domain/workspace.js';

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '1000000' },
    'batch-size': { type: 'string', default: '20000' },
    'cached-rows': { type: 'string' },
    database: { type: 'string' },
    keep: { type: 'boolean', default: false },
    verify: { type: 'boolean', default: false },
  },
});
const eventCount = Number(values.events);
const batchSize = Number(values['batch-size']);
const logger = pino({ level: process.env.LOG_LEVEL || 'warn' }, pino.destination(2));
const out = (line: string) => process.stdout.write(`${line}\n`);
const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

// ---------------------------------------------------------------------------------------------
// A generator of valid histories with O(1) choices (test/support/generate.ts scans every record
// per choice, too slow for a million events).

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

function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Row = { stream: string; version: number; type: string; data: string; metadata: string };

class HistoryGenerator {
  private readonly random = seededRandom(20_240_601);
  private tick = 1_700_000_000_000_000n;
  private counter = 0;
  private readonly workspaces = new Map<string, { state: WorkspaceState; version: number; solutions: Bag<string> }>();
  private readonly solutions = new Map<string, { state: SolutionState; version: number; workspaceId: string }>();
  private readonly activeWorkspaces = bag<string>();
  private readonly activeSolutions = bag<string>();
  readonly streams = new Map<string, number>();

  private context(): CommandContext {
    this.tick += 13n;
    return { actor: `user-${Math.floor(this.random() * 50)}`, requestId: randomUUID(), now: fromMicros(this.tick) };
  }

  private pick(b: Bag<string>): string {
    return b.items[Math.floor(this.random() * b.items.length)]!;
  }

  private row(stream: string, event: Envelope): Row {
    const version = (this.streams.get(stream) ?? 0) + 1;
    this.streams.set(stream, version);
    return { stream, version, type: event.type, data: JSON.stringify(event.data), metadata: JSON.stringify(event.metadata) };
  }

  /** The events of one command (a workspace deletion brings its solutions' cascade deletions). */
  next(): Row[] {
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

  private workspaceEvents(id: string, events: Envelope[]): Row[] {
    const entry = this.workspaces.get(id)!;
    entry.state = events.reduce((s, e) => evolveWorkspace(s, e as never), entry.state);
    return events.map((event) => this.row(workspaceStream(id), event));
  }

  private solutionEvents(id: string, events: Envelope[]): Row[] {
    const entry = this.solutions.get(id)!;
    entry.state = events.reduce((s, e) => evolveSolution(s, e as never), entry.state);
    return events.map((event) => this.row(solutionStream(id), event));
  }

  private createWorkspace(): Row[] {
    const id = `ws_bench${(this.counter++).toString(36).padStart(16, '0')}`;
    this.workspaces.set(id, { state: initialWorkspaceState, version: 0, solutions: bag() });
    add(this.activeWorkspaces, id);
    const organizationId = `org_bench${Math.floor(this.random() * 100)}`;
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

  private updateWorkspace(id: string): Row[] {
    const entry = this.workspaces.get(id)!;
    const events = decideWorkspace(
      { type: 'UpdateWorkspace', id, name: `renamed ${this.counter++}`, attributes: { k: { v: this.counter } }, context: this.context() },
      entry.state,
    );
    return this.workspaceEvents(id, events);
  }

  private deleteWorkspace(id: string): Row[] {
    const entry = this.workspaces.get(id)!;
    const context = this.context();
    const rows = this.workspaceEvents(id, decideWorkspace({ type: 'DeleteWorkspace', id, context }, entry.state));
    remove(this.activeWorkspaces, id);
    // The cascade worker's deletions, with the workspace deletion's actor, request and time.
    for (const solutionId of [...entry.solutions.items]) rows.push(...this.deleteSolution(solutionId, 'CascadeDeleteSolution', context));
    return rows;
  }

  private createSolution(workspaceId: string): Row[] {
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

  private updateSolution(id: string): Row[] {
    const entry = this.solutions.get(id)!;
    const events = decideSolution(
      { type: 'UpdateSolution', id, name: `s${this.counter++}`, attributes: { n: this.counter }, context: this.context() },
      entry.state,
    );
    return this.solutionEvents(id, events);
  }

  private deleteSolution(id: string, type: 'DeleteSolution' | 'CascadeDeleteSolution', context = this.context()): Row[] {
    const entry = this.solutions.get(id)!;
    remove(this.activeSolutions, id);
    remove(this.workspaces.get(entry.workspaceId)!.solutions, id);
    return this.solutionEvents(id, decideSolution({ type, id, context }, entry.state));
  }
}

async function seed(client: pg.Client, count: number): Promise<void> {
  const generator = new HistoryGenerator();
  // Event ids in insertion order (a random prefix per run, then a counter): the unique index on
  // them then grows at its end instead of taking every insert at a random place.
  const runPrefix = `${randomUUID().slice(0, 24)}`;
  const started = performance.now();
  let written = 0;
  let pending: Row[] = [];
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
        pending.map((r) => r.data),
        pending.map((r) => r.metadata),
        written,
        runPrefix,
      ],
    );
    written += pending.length;
    pending = [];
    if (process.stderr.isTTY) process.stderr.write(`\rseeding: ${integer.format(written)}/${integer.format(count)} events`);
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
  // that the rebuild does not pay for the seeding's aftermath, nor compete with autovacuum over it.
  await client.query('VACUUM (ANALYZE) es_events, es_streams');
  if (process.stderr.isTTY) process.stderr.write('\n');
  out(`seeded ${integer.format(written)} events in ${streams.length} streams in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

// ---------------------------------------------------------------------------------------------
// CPU accounting (Linux): this process, the PostgreSQL server (postmaster with its reaped and
// live children) and the whole machine, so that a figure taken on a busy or stolen-from virtual
// machine can be told apart from the rebuild's own cost.

const ticksPerSecond = 100;
function processTicks(pid: number): { own: number; children: number } | undefined {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return { own: Number(fields[11]) + Number(fields[12]), children: Number(fields[13]) + Number(fields[14]) };
  } catch {
    return undefined;
  }
}
function postgresTicks(postmasterPid: number | undefined): number | undefined {
  if (!postmasterPid) return undefined;
  const main = processTicks(postmasterPid);
  if (!main) return undefined;
  let total = main.own + main.children;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.split(') ')[1]!.split(' ')[1]) === postmasterPid) total += processTicks(Number(entry))?.own ?? 0;
    } catch {
      // gone meanwhile
    }
  }
  return total;
}
function machineTicks(): { busy: number; steal: number; total: number } {
  const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = cpu;
  return { busy: user + nice + system + irq + softirq, steal, total: user + nice + system + idle + iowait + irq + softirq + steal };
}
const findPostmaster = () =>
  (() => {
    try {
      const dataDir = process.env.DATA_DIR || path.join(tmpdir(), 'wsapi-bench-rebuild');
      return process.env.DATABASE_URL ? undefined : Number(readFileSync(path.join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
    } catch {
      return undefined;
    }
  })();

// ---------------------------------------------------------------------------------------------

const embedded = process.env.DATABASE_URL
  ? undefined
  : await startEmbeddedPostgres(process.env.DATA_DIR || path.join(tmpdir(), 'wsapi-bench-rebuild'), logger);
const serverUrl = process.env.DATABASE_URL ?? embedded!.url;
const databaseName = values.database ?? `bench_rebuild_${Date.now()}`;
if (!/^[a-z_][a-z0-9_]*$/.test(databaseName)) throw new Error(`not a plain database name: ${databaseName}`);
const databaseUrl = databaseUrlOn(serverUrl, databaseName);

const admin = new pg.Client({ connectionString: serverUrl });
await admin.connect();
const exists = (await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [databaseName])).rowCount === 1;
if (!exists) await admin.query(`CREATE DATABASE ${databaseName}`);

// The stores as every process opens them (src/runtime/stores.ts), on the bench's own database.
const stores = await openStores(parseConfig({ DATABASE_URL: databaseUrl }, 'tool'), logger, { poolSize: 6, listen: false });
const { pool, store } = stores;
try {
  const seeder = new pg.Client({ connectionString: databaseUrl });
  await seeder.connect();
  try {
    const present = Number((await seeder.query<{ n: string }>('SELECT count(*) AS n FROM es_events')).rows[0]!.n);
    if (present === 0) await seed(seeder, eventCount);
    else out(`using the ${integer.format(present)} events already in ${databaseName}`);
  } finally {
    await seeder.end();
  }

  const total = Number((await pool.query<{ n: string }>('SELECT count(*) AS n FROM es_events')).rows[0]!.n);
  const postmaster = findPostmaster();
  const cpuBefore = { node: process.cpuUsage(), postgres: postgresTicks(postmaster), machine: machineTicks() };
  let copyDoneAt = 0;
  let lastLine = 0;
  const result = await rebuildReadModel({
    connectionString: databaseUrl,
    store,
    logger,
    batchSize,
    ...(values['cached-rows'] ? { cachedRows: Number(values['cached-rows']) } : {}),
    estimateTotal: async () => total,
    onProgress: (p) => {
      if (p.phase === 'switching' && copyDoneAt === 0) copyDoneAt = p.elapsedMs;
      if (p.elapsedMs - lastLine >= 5000) {
        lastLine = p.elapsedMs;
        out(
          `  ${integer.format(p.done)}/${integer.format(p.total ?? 0)} events, ${integer.format((p.done / p.elapsedMs) * 1000)} events/s`,
        );
      }
    },
  });
  const counts = (
    await pool.query<{ w: string; s: string }>('SELECT (SELECT count(*) FROM workspaces) AS w, (SELECT count(*) FROM solutions) AS s')
  ).rows[0]!;
  out(
    `rebuilt ${integer.format(result.events)} events in ${(result.elapsedMs / 1000).toFixed(2)} s: ` +
      `${integer.format(result.eventsPerSecond)} events/s overall ` +
      `(copy ${(copyDoneAt / 1000).toFixed(2)} s, switch ${((result.elapsedMs - copyDoneAt) / 1000).toFixed(2)} s, batch size ${batchSize}); ` +
      `read tables: ${integer.format(Number(counts.w))} workspaces, ${integer.format(Number(counts.s))} solutions`,
  );
  const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  out(
    `phases: ${result.bulk ? 'bulk load' : 'batch copy'} ${seconds(result.phases.loadMs)}, index builds and ANALYZE ${seconds(result.phases.indexesMs)}, ` +
      `catch-up ${seconds(result.phases.catchUpMs)}, switch ${seconds(result.phases.switchMs)}`,
  );
  const nodeCpu = process.cpuUsage(cpuBefore.node);
  const postgresAfter = postgresTicks(postmaster);
  const machine = machineTicks();
  const machineTotal = machine.total - cpuBefore.machine.total;
  const nodeSeconds = (nodeCpu.user + nodeCpu.system) / 1e6;
  const postgresSeconds =
    postgresAfter !== undefined && cpuBefore.postgres !== undefined ? (postgresAfter - cpuBefore.postgres) / ticksPerSecond : undefined;
  out(
    `cpu: node ${nodeSeconds.toFixed(1)} s` +
      (postgresSeconds === undefined ? '' : `, postgres ${postgresSeconds.toFixed(1)} s`) +
      ` (${((nodeSeconds + (postgresSeconds ?? 0)) / (result.elapsedMs / 1000)).toFixed(2)} cores busy on average); machine: ` +
      `${((100 * (machine.busy - cpuBefore.machine.busy)) / machineTotal).toFixed(0)}% busy, ` +
      `${((100 * (machine.steal - cpuBefore.machine.steal)) / machineTotal).toFixed(0)}% stolen by the hypervisor`,
  );
  if (postgresSeconds !== undefined) {
    out(
      `cpu-bound rate on ${cpus().length} idle cores: ${integer.format(result.events / Math.max(nodeSeconds, (nodeSeconds + postgresSeconds) / cpus().length))} events/s (at best)`,
    );
  }
  // Before verify, which holds the whole read model in memory.
  out(`node: max RSS ${integer.format(process.resourceUsage().maxRSS / 1024)} MB`);
  if (values.verify) {
    const differences = compareReadModels(await expectedReadModel(store), await actualReadModel(pool));
    out(differences.length === 0 ? 'verify: no differences' : `verify: ${differences.length} differences, first: ${differences[0]}`);
    if (differences.length > 0) process.exitCode = 1;
  }
} finally {
  await stores.close();
  // A backend outlives its closed connection by a moment: let ours go before dropping the
  // database, and before stop(), which leaves the server running while other clients are connected.
  const settle = () => new Promise((resolve) => setTimeout(resolve, 250));
  await settle();
  if (!values.keep && !values.database) await admin.query(`DROP DATABASE IF EXISTS ${databaseName} WITH (FORCE)`);
  else out(`kept database ${databaseName} (reuse: --database ${databaseName})`);
  await admin.end();
  await settle();
  await embedded?.stop();
}
