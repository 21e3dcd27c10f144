/**
 * npm run bench:catch-up [-- --events 1000000 --event-store postgres|eventstoredb --database NAME --keep]
 *
 * How fast the projector of a freshly started service catches up with a long log, and what
 * `/readyz` says meanwhile. Seeds `--events` valid events (bench/seeded-history.ts, the history
 * bench:rebuild seeds), empties the read tables and the projector's checkpoint (as after a restore,
 * or on a fresh read database), starts the service as its own process (`src/main.ts`, as
 * `npm start` runs it) and prints: the catch-up rate (events/s from the service's start to its
 * checkpoint, read from the database, reaching the log's end), when `/readyz` first answered 200
 * and how many events were still unprojected then, and what `npm run projections:verify` found.
 *
 * The events: in PostgreSQL (written straight into es_events, as bench:rebuild does), or with
 * `--event-store eventstoredb` in the EventStoreDB stand-in (test/support/eventstoredb-standin/),
 * run as a process of its own, as a node is, and seeded through the service's adapter and the real
 * client.
 * PostgreSQL: DATABASE_URL's server when set, else the embedded one on DATA_DIR (default: a
 * directory under the system's temporary directory, kept between runs). The database is dropped
 * afterwards unless --keep; --database NAME reuses (or creates) a named one, and on PostgreSQL the
 * events already in it (the stand-in's log lives only as long as the run).
 */
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { pino } from 'pino';
import { parseConfig } from '../src/config.js';
import { walkLog } from '../src/eventstore/event-log.js';
import { comparePositions, encodePosition, startOfLog, type GlobalPosition } from '../src/eventstore/port.js';
import { readCheckpoint } from '../src/projections/tables.js';
import { openStores } from '../src/runtime/stores.js';
import { startServiceProcess, type ServiceProcess } from '../test/support/service-process.js';
import { finishBenchDatabase, openBenchDatabase } from './databases.js';
import { percentile } from './statistics.js';
import { startStandInProcess } from './stand-in-process.js';
import { appendsInFlight, seedEventStoreDB, seedPostgresLog } from './seeded-history.js';

const usage = 'usage: npm run bench:catch-up -- [--events 1000000] [--event-store postgres|eventstoredb] [--database NAME] [--keep]\n';
const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '1000000' },
    'event-store': { type: 'string', default: 'postgres' },
    database: { type: 'string' },
    keep: { type: 'boolean', default: false },
  },
});
const eventCount = Number(values.events);
const onEventStoreDB = values['event-store'] === 'eventstoredb';
if (!['postgres', 'eventstoredb'].includes(values['event-store']!) || !Number.isInteger(eventCount) || eventCount <= 0) {
  process.stderr.write(usage);
  process.exit(2);
}
const databaseName = values.database ?? `bench_catch_up_${Date.now()}`;

const logger = pino({ level: process.env.LOG_LEVEL || 'warn' }, pino.destination(2));
const out = (line: string) => process.stdout.write(`${line}\n`);
const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** How often the checkpoint and /readyz are asked: fine enough for runs of seconds, light enough not to slow the projector. */
const pollMs = 20;
/**
 * A projector whose checkpoint stands still this long while behind has stopped (a dead letter, a
 * crash loop): the run fails. Long enough for a bulk catch-up, which moves it once, at its end.
 */
const stalledAfterMs = 600_000;
/** How often the reader asks for a record while the projector catches up, and after. */
const readIntervalMs = 10;
/** How long after the catch-up /readyz may still answer 503 before the run reports that it never answered 200. */
const readyDeadlineMs = 30_000;
const exited = (service: ServiceProcess) => service.child.exitCode !== null || service.child.signalCode !== null;

/** The seeded log as this bench needs it: its length, its last event, the events after a checkpoint, how it was seeded. */
type SeededLog = {
  events: number;
  end: GlobalPosition;
  unprojectedAfter: (checkpoint: GlobalPosition) => Promise<number>;
  seeding: string;
};

const { embedded, admin, databaseUrl } = await openBenchDatabase({
  name: databaseName,
  usage,
  defaultDataDir: path.join(tmpdir(), 'wsapi-bench-catch-up'),
  logger,
});
const standIn = onEventStoreDB ? await startStandInProcess() : undefined;

// The stores as every process opens them (src/runtime/stores.ts): the schema brought up to date, the adapter to seed through.
const stores = await openStores(parseConfig({ DATABASE_URL: databaseUrl, EVENTSTORE_URL: standIn?.url ?? '' }, 'tool'), logger, {
  poolSize: 4,
  listen: false,
});
const { pool } = stores;
let exitCode = 0;
try {
  const log = standIn ? await seedStandIn() : await seedPostgres();

  // As after a restore of the log alone, or on a fresh read database: no rows, no checkpoint, no
  // dead letters (they name positions the projector stopped at before), and nothing else derived
  // from the log (the change feed, snapshots, the command index, the integrity trees), all of which
  // the service then derives again beside the projection.
  await pool.query(
    `TRUNCATE workspaces, solutions, organization_counts, workspace_solution_counts, cascade_pending, projection_checkpoints,
       projection_dead_letters, changes, record_snapshots, record_commands, record_command_marks,
       integrity_streams, integrity_trees, integrity_leaves, integrity_nodes, integrity_checkpoints`,
  );
  await pool.query('UPDATE integrity_progress SET commit_position = 0, prepare_position = 0');

  // The checkpoint is watched from the moment the service is started: a short log may be
  // projected before the service answers /healthz.
  const watching = new AbortController();
  const startedAt = performance.now();
  const since = () => performance.now() - startedAt;
  let service: ServiceProcess | undefined;
  const starting = startServiceProcess({ databaseUrl, eventStoreUrl: standIn?.url, env: { LOG_LEVEL: 'warn' } });
  let caughtUpMs: number | undefined;
  const catchingUp = waitForCatchUp(log.end, since, watching.signal, () => service !== undefined && exited(service));
  // Awaited below; should the service fail to start first, that failure is the one reported.
  catchingUp.catch(() => undefined);
  try {
    service = await starting;
    const healthyMs = since();
    const ready = watchReadiness(
      service.url,
      since,
      log,
      () => watching.signal.aborted || (caughtUpMs !== undefined && since() - caughtUpMs > readyDeadlineMs),
    );
    // Awaited below; should the catch-up fail first, that failure is the one reported.
    ready.catch(() => undefined);
    // Reads while the projector catches up, then the same reads once it has: what a catch-up costs a reader.
    const records = await workspacesInTheLog();
    const reader = readWhile(service, () => caughtUpMs !== undefined || watching.signal.aborted, records);
    reader.catch(() => undefined);
    const caughtUp = await catchingUp;
    caughtUpMs = caughtUp.caughtUpMs;
    const firstReady = await ready;
    const during = await reader;
    const idleUntil = performance.now() + 3000;
    const idle = await readWhile(service, () => performance.now() > idleUntil, records);
    await service.signal('SIGTERM');

    const verify = await runVerify(standIn?.url ?? '');
    const rate = log.events / (caughtUpMs / 1000);
    // Its differences and notes, if any; its last line goes into the summary.
    const verifyDetails = verify.output.trim().split('\n').slice(0, -1);
    for (const line of verifyDetails) out(`projections:verify: ${line}`);
    const rows: [string, string][] = [
      ['event store', standIn ? 'EventStoreDB (stand-in, a process of its own)' : 'PostgreSQL'],
      ['PostgreSQL', `${process.env.DATABASE_URL ? 'DATABASE_URL' : 'embedded'}, database ${databaseName}`],
      ['events in the log', integer.format(log.events)],
      ['seeding', log.seeding],
      ['service started (/healthz)', seconds(healthyMs)],
      ['caught up (checkpoint at the log end)', `${seconds(caughtUpMs)} after the start: ${integer.format(rate)} events/s`],
      [
        'projecting (first checkpoint move to the end)',
        // A bulk catch-up moves the checkpoint once, to the end.
        caughtUpMs - caughtUp.firstMovedMs > pollMs
          ? `${seconds(caughtUpMs - caughtUp.firstMovedMs)}: ${integer.format(log.events / ((caughtUpMs - caughtUp.firstMovedMs) / 1000))} events/s`
          : 'in one move (bulk)',
      ],
      [
        '/readyz first answered 200',
        firstReady
          ? `${seconds(firstReady.atMs)} after the start, with ${integer.format(firstReady.unprojected)} events unprojected`
          : `not within ${readyDeadlineMs / 1000} s of catching up`,
      ],
      ['projections:verify', verify.code === 0 ? verify.summary : `exit ${verify.code}: ${verify.summary}`],
      [
        'get_workspace p50 / p99, catching up',
        during.latencies.length > 0
          ? `${latencies(during.latencies)} (${integer.format(during.latencies.length)} reads, ${integer.format(during.projected)} found); ` +
            `idle: ${latencies(idle.latencies)}; ` +
            `p99 ratio ${(percentile(during.latencies, 99) / percentile(idle.latencies, 99)).toFixed(2)}x`
          : 'caught up before the first read',
      ],
    ];
    const width = Math.max(...rows.map(([name]) => name.length));
    for (const [name, value] of rows) out(`${name.padEnd(width)}  ${value}`);
    if (verify.code !== 0) exitCode = 1;
  } catch (error) {
    if (service) process.stderr.write(`service output:\n${service.output()}\n`);
    throw error;
  } finally {
    watching.abort();
    await service?.signal('SIGKILL');
  }
} finally {
  await stores.close();
  await standIn?.stop();
  await finishBenchDatabase({ admin, name: databaseName, keep: Boolean(values.keep || values.database), embedded, out });
}
process.exit(exitCode);

async function seedPostgres(): Promise<SeededLog> {
  const present = Number((await pool.query<{ n: string }>('SELECT count(*) AS n FROM es_events')).rows[0]!.n);
  let seeding = `none: the events already in ${databaseName}`;
  if (present === 0) {
    const seeder = new pg.Client({ connectionString: databaseUrl });
    await seeder.connect();
    try {
      const seeded = await seedPostgresLog(seeder, eventCount);
      seeding = `${seeded.seconds.toFixed(1)} s, straight into es_events`;
      out(`seeded ${integer.format(seeded.events)} events in ${integer.format(seeded.streams)} streams in ${seeded.seconds.toFixed(1)} s`);
    } finally {
      await seeder.end();
    }
  } else {
    out(`using the ${integer.format(present)} events already in ${databaseName}`);
  }
  const { rows } = await pool.query<{ events: string; commit: string; prepare: string }>(
    `SELECT (SELECT count(*) FROM es_events) AS events, transaction_id::text AS commit, position AS prepare
     FROM es_events ORDER BY transaction_id DESC, position DESC LIMIT 1`,
  );
  const last = rows[0]!;
  return {
    events: Number(last.events),
    seeding,
    end: { commit: BigInt(last.commit), prepare: BigInt(last.prepare) },
    // The log's global order, as the PostgreSQL store reads it (src/eventstore/postgres.ts).
    unprojectedAfter: async (checkpoint) =>
      Number(
        (
          await pool.query<{ n: string }>('SELECT count(*) AS n FROM es_events WHERE (transaction_id, position) > ($1::text::xid8, $2)', [
            checkpoint.commit.toString(),
            checkpoint.prepare.toString(),
          ])
        ).rows[0]!.n,
      ),
  };
}

async function seedStandIn(): Promise<SeededLog> {
  const seeded = await seedEventStoreDB(stores.store, eventCount);
  const seeding =
    `${seeded.seconds.toFixed(1)} s, ${integer.format(seeded.events / seeded.seconds)} events/s ` +
    `(${integer.format(seeded.appends)} appends through the adapter, up to ${appendsInFlight} on their way at once)`;
  out(`seeded ${integer.format(seeded.events)} events in ${integer.format(seeded.streams)} streams in ${seeding}`);
  return {
    events: seeded.events,
    seeding,
    end: seeded.end,
    // Asked once, when /readyz first answers 200: a short read then, however long the log.
    unprojectedAfter: async (checkpoint) => {
      let unprojected = 0;
      for await (const page of walkLog(stores.store, checkpoint, 10_000)) unprojected += page.length;
      return unprojected;
    },
  };
}

/** Polls the checkpoint until it reaches `end`; the times since the start when it first moved and when it reached the end. */
async function waitForCatchUp(
  end: GlobalPosition,
  since: () => number,
  signal: AbortSignal,
  serviceExited: () => boolean,
): Promise<{ firstMovedMs: number; caughtUpMs: number }> {
  let last = await readCheckpoint(pool);
  let movedAt = since();
  let firstMovedMs: number | undefined;
  for (;;) {
    const checkpoint = await readCheckpoint(pool);
    if (comparePositions(checkpoint, end) >= 0) return { firstMovedMs: firstMovedMs ?? since(), caughtUpMs: since() };
    if (comparePositions(checkpoint, last) !== 0) {
      [last, movedAt] = [checkpoint, since()];
      firstMovedMs ??= movedAt;
    }
    signal.throwIfAborted();
    if (serviceExited()) throw new Error('the service exited before its projector caught up');
    if (since() - movedAt > stalledAfterMs) {
      throw new Error(
        `the checkpoint stood at ${encodePosition(checkpoint)} for ${stalledAfterMs / 1000} s, short of ${encodePosition(end)}`,
      );
    }
    await sleep(pollMs);
  }
}

/**
 * Asks /readyz until it first answers 200; then when that was (since the start) and how many events
 * the checkpoint, read right after, was still short of. Undefined if `giveUp` says so first.
 */
function latencies(values: number[]): string {
  return `${percentile(values, 50).toFixed(2)} / ${percentile(values, 99).toFixed(2)} ms`;
}

/** Workspaces the log creates, among its first events: what the reader asks for, projected or not yet. */
async function workspacesInTheLog(): Promise<{ id: string; organization_id: string }[]> {
  const found: { id: string; organization_id: string }[] = [];
  for (const event of await stores.store.readAll(startOfLog, 5000)) {
    const data = event.data as { id?: string; organization_id?: string };
    if (event.type === 'WorkspaceCreated' && data.id && data.organization_id)
      found.push({ id: data.id, organization_id: data.organization_id });
  }
  return found.slice(0, 500);
}

/**
 * `get_workspace` as one reader asks it, one request every `readIntervalMs` (or as soon as the one
 * before it has answered, if that took longer), on workspaces the log creates, until `done`; each
 * answer's latency, and how many were found. A record not projected yet is answered 404 by the
 * same path (token, query by key), so a bulk catch-up, which shows its tables only at its end, is
 * measured too. A light, steady reader measures what a catch-up costs a request; a flood of reads
 * would measure how the two share the machine's cores instead.
 */
async function readWhile(service: ServiceProcess, done: () => boolean, records: { id: string; organization_id: string }[]) {
  const found: number[] = [];
  let projected = 0;
  const token = await service.token([...new Set(records.map((record) => record.organization_id))]);
  for (let next = 0; !done(); next++) {
    const { id } = records[next % records.length]!;
    const started = performance.now();
    const response = await fetch(`${service.url}/api`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query: 'get_workspace', params: { id } }),
    });
    await response.arrayBuffer();
    const took = performance.now() - started;
    found.push(took);
    if (response.status === 200) projected += 1;
    await sleep(Math.max(0, readIntervalMs - took));
  }
  return { latencies: found, projected };
}

async function watchReadiness(
  url: string,
  since: () => number,
  log: SeededLog,
  giveUp: () => boolean,
): Promise<{ atMs: number; unprojected: number } | undefined> {
  while (!giveUp()) {
    // A refused or timed-out probe is an answer too: not ready yet.
    const status = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(5000) }).then(
      (response) => response.status,
      () => 0,
    );
    if (status === 200) {
      const atMs = since();
      return { atMs, unprojected: await log.unprojectedAfter(await readCheckpoint(pool)) };
    }
    await sleep(pollMs);
  }
  return undefined;
}

/** `npm run projections:verify` on the bench's database and event store: its exit code, its output, and its last line. */
function runVerify(eventStoreUrl: string): Promise<{ code: number | null; output: string; summary: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('npm', ['run', '--silent', 'projections:verify'], {
      env: { ...process.env, DATABASE_URL: databaseUrl, EVENTSTORE_URL: eventStoreUrl },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      const lines = output.trim().split('\n');
      resolve({ code, output, summary: lines[lines.length - 1] ?? '' });
    });
  });
}
