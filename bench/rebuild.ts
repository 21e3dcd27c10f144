/**
 * npm run bench:rebuild [-- --events 1000000 --batch-size 20000 --cached-rows N --keep --database NAME --verify]
 *
 * Seeds a fresh database with `--events` valid events (bench/seeded-history.ts: creates, updates
 * and deletes of workspaces and solutions, workspace deletions with their cascades; decided by the
 * real deciders, written straight into es_events/es_streams in big transactions), then rebuilds the
 * read tables from them with the same code as `npm run projections:rebuild` and prints the rate.
 *
 * PostgreSQL: DATABASE_URL's server when set, else the embedded one on DATA_DIR (default: a
 * directory under the system's temporary directory, kept between runs). The seeded database is
 * dropped afterwards unless --keep; --database NAME reuses (or creates and seeds) a named one.
 * --verify folds every stream afterwards and compares it with the rebuilt tables.
 */
import { readFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { pino } from 'pino';
import { startEmbeddedPostgres } from '../src/infra/embedded-postgres.js';
import { databaseUrl as databaseUrlOn, finishBenchDatabase } from './databases.js';
import { parseConfig } from '../src/config.js';
import { rebuildReadModel } from '../src/projections/rebuild/index.js';
import { openStores } from '../src/runtime/stores.js';
import { actualReadModel, compareReadModels, expectedReadModel } from '../src/projections/verify.js';
import { seedPostgresLog } from './seeded-history.js';
import { machineTicks, postgresTicks, ticksPerSecond } from './cpu-ticks.js';

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
// CPU accounting (bench/cpu-ticks.ts): the rebuild's own PostgreSQL server, found by its data directory.

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
    if (present === 0) {
      const seeded = await seedPostgresLog(seeder, eventCount);
      out(`seeded ${integer.format(seeded.events)} events in ${seeded.streams} streams in ${seeded.seconds.toFixed(1)} s`);
    } else out(`using the ${integer.format(present)} events already in ${databaseName}`);
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
  await finishBenchDatabase({ admin, name: databaseName, keep: Boolean(values.keep || values.database), embedded, out });
}
