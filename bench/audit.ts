/**
 * What provable history costs (issue 23), each figure side by side in one run:
 *
 * 1. create_workspace throughput of the service against the same build with hashing and the tree
 *    off (BENCH_WITHOUT_INTEGRITY=true, a bench-only setting: events appended without hashes, as
 *    before they existed, and no tree kept), each on its own database of one server, the load from
 *    this process over `--connections` keep-alive connections, the two alternating round by round;
 * 2. get_workspace_proof in an organization of `--events` events (seeded straight into
 *    PostgreSQL's log, the tree then built by the service), with how fast the tree was built;
 * 3. `npm run audit:verify` over that log: its events per second, start-up included;
 * 4. diff_workspace over the last 10 events of a record of `--record-events` events against one of
 *    20 (both appended through the adapter), after a first diff of each, which makes the long
 *    record's provenance snapshots.
 *
 *   npm run bench:audit -- [--events 1000000] [--record-events 100000] [--seconds 5] [--rounds 3] [--connections 32] [--requests 200] [--keep]
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { pino } from 'pino';
import { mintToken } from '../src/api/tokens.js';
import { parseConfig } from '../src/config.js';
import { fromMicros, toMicros } from '../src/domain/timestamp.js';
import { startEmbeddedPostgres } from '../src/infra/embedded-postgres.js';
import { openStores } from '../src/runtime/stores.js';
import { startServiceProcess, type ServiceProcess } from '../test/support/service-process.js';
import { testSecret } from '../test/support/secret.js';
import { addCpu, cpuPerCreate, cpuSeconds, localPostmaster } from './cpu-ticks.js';
import { databaseUrl as databaseUrlOn, finishBenchDatabase } from './databases.js';
import { organization as hotOrganization, seedHotRecord } from './hot-record.js';
import { seedPostgresLog } from './seeded-history.js';
import { apiClient, type Target } from './http.js';
import { percentile } from './statistics.js';

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '1000000' },
    'record-events': { type: 'string', default: '100000' },
    seconds: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '32' },
    requests: { type: 'string', default: '200' },
    keep: { type: 'boolean', default: false },
  },
});
const eventCount = Number(values.events);
const recordEvents = Number(values['record-events']);
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const connections = Number(values.connections);
const requests = Number(values.requests);
/** The one organization the seeded log's workspaces belong to (HistoryGenerator names them org_bench<n>). */
const organization = 'org_bench0';
const createOrganization = 'org_bench_create';

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
const fixed = (value: number, digits = 2) => value.toFixed(digits);
const out = (line: string) => console.log(line);
const { post, sequential, close } = apiClient(connections);

type Load = { count: number; elapsedMs: number; latencies: number[]; failures: number };

/** create_workspace over `connections` connections for `seconds`. */
async function creates(target: Target): Promise<Load> {
  const latencies: number[] = [];
  let failures = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: connections }, async (_, connection) => {
      for (let n = 0; performance.now() - started < seconds * 1000; n++) {
        const answer = await post(target, 'create_workspace', { organization_id: createOrganization, name: `c${connection}-${n}` });
        if (answer.status === 200) latencies.push(answer.ms);
        else failures += 1;
      }
    }),
  );
  return { count: latencies.length, elapsedMs: performance.now() - started, latencies, failures };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const logger = pino({ level: 'warn' });
const dataDir = mkdtempSync(path.join(tmpdir(), 'wsapi-bench-audit-'));
const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres(dataDir, logger);
const serverUrl = process.env.DATABASE_URL ?? embedded!.url;
const admin = new pg.Client({ connectionString: serverUrl });
await admin.connect();
const stamp = Date.now();
const names = { on: `bench_audit_on_${stamp}`, off: `bench_audit_off_${stamp}`, log: `bench_audit_log_${stamp}` };
for (const name of Object.values(names)) await admin.query(`CREATE DATABASE ${name}`);
const token = await mintToken(testSecret, {
  subject: 'bench-audit',
  organizations: [organization, createOrganization, hotOrganization],
  expiresIn: '4h',
});
const services: ServiceProcess[] = [];
const start = async (name: string, env: Record<string, string> = {}) => {
  const service = await startServiceProcess({ databaseUrl: databaseUrlOn(serverUrl, name), env: { LOG_LEVEL: 'warn', ...env } });
  services.push(service);
  return service;
};
const stop = async (service: ServiceProcess) => {
  await service.signal('SIGTERM');
  services.splice(services.indexOf(service), 1);
};

try {
  out(`PostgreSQL ${process.env.DATABASE_URL ? 'DATABASE_URL' : 'embedded'}; events in PostgreSQL; ${new Date().toISOString()}`);

  // 1. Throughput with and without integrity.
  const on = await start(names.on);
  const off = await start(names.off, { BENCH_WITHOUT_INTEGRITY: 'true' });
  const targets = { on: { url: on.url, token }, off: { url: off.url, token } };
  await creates(targets.on);
  const totals = { on: [] as Load[], off: [] as Load[] };
  // Each side's own process, and the server and this process while that side is loaded (the other
  // side's keeper may still be catching up then: counted against the side being loaded).
  const postmaster = await localPostmaster(admin);
  const cpu = { on: { service: 0, postgres: 0, bench: 0 }, off: { service: 0, postgres: 0, bench: 0 } };
  const pids = { on: on.pid, off: off.pid };
  for (let round = 0; round < rounds; round++) {
    for (const side of round % 2 === 0 ? (['on', 'off'] as const) : (['off', 'on'] as const)) {
      const before = cpuSeconds(pids[side], postmaster);
      totals[side].push(await creates(targets[side]));
      addCpu(cpu[side], before, cpuSeconds(pids[side], postmaster));
    }
  }
  await creates(targets.off);
  const made = (loads: Load[]) => loads.reduce((sum, load) => sum + load.count, 0);
  const rate = (loads: Load[]) => (made(loads) * 1000) / loads.reduce((sum, load) => sum + load.elapsedMs, 0);
  const all = (loads: Load[]) => loads.flatMap((load) => load.latencies);
  const failed = (loads: Load[]) => loads.reduce((sum, load) => sum + load.failures, 0);
  // The baseline really was without: no event with a hash, no leaf.
  const baseline = new pg.Client({ connectionString: databaseUrlOn(serverUrl, names.off) });
  await baseline.connect();
  const { rows } = await baseline.query<{ hashed: string; leaves: string }>(
    `SELECT (SELECT count(*) FROM es_events WHERE metadata ? 'hash') AS hashed, (SELECT count(*) FROM integrity_leaves) AS leaves`,
  );
  await baseline.end();
  out(`\n1. create_workspace, ${connections} connections, ${rounds} rounds of ${seconds} s each, alternating`);
  out(`${''.padEnd(34)}${'integrity on'.padStart(14)}${'off'.padStart(14)}${'on/off'.padStart(9)}`);
  out(
    `${'throughput, creates/s'.padEnd(34)}${fixed(rate(totals.on), 0).padStart(14)}${fixed(rate(totals.off), 0).padStart(14)}${`${fixed(rate(totals.on) / rate(totals.off))}x`.padStart(9)}`,
  );
  for (const q of [50, 99]) {
    const [a, b] = [percentile(all(totals.on), q), percentile(all(totals.off), q)];
    out(`${`p${q} ms`.padEnd(34)}${fixed(a).padStart(14)}${fixed(b).padStart(14)}${`${fixed(a / b)}x`.padStart(9)}`);
  }
  out(`${'non-200 answers'.padEnd(34)}${String(failed(totals.on)).padStart(14)}${String(failed(totals.off)).padStart(14)}`);
  out(`CPU, integrity on:  ${cpuPerCreate(cpu.on, made(totals.on))}`);
  out(`CPU, integrity off: ${cpuPerCreate(cpu.off, made(totals.off))}`);
  out(`baseline check: ${rows[0]!.hashed} events with hashes, ${rows[0]!.leaves} leaves (both must be 0)`);
  await stop(on);
  await stop(off);

  // 2. Proofs in an organization of `eventCount` events.
  const logUrl = databaseUrlOn(serverUrl, names.log);
  const stores = await openStores(parseConfig({ DATABASE_URL: logUrl }, 'tool'), logger, { poolSize: 2, listen: false });
  await stores.close();
  const seeder = new pg.Client({ connectionString: logUrl });
  await seeder.connect();
  const seeded = await seedPostgresLog(seeder, eventCount, 1);
  const workspaceIds = (
    await seeder.query<{ id: string }>(
      `SELECT substr(stream_name, 11) AS id FROM es_streams WHERE stream_name LIKE 'workspace-%' ORDER BY random() LIMIT 1000`,
    )
  ).rows.map((row) => row.id);
  await seeder.end();
  out(
    `\n2. seeded ${integer.format(seeded.events)} events (${integer.format(seeded.streams)} streams, one organization) in ${fixed(seeded.seconds, 1)} s`,
  );
  const treeStarted = performance.now();
  const service = await start(names.log, { AUDIT_CHECKPOINT_INTERVAL_MS: '1000' });
  const target: Target = { url: service.url, token };
  for (;;) {
    const answer = await post(target, 'get_checkpoint', { organization_id: organization });
    if (answer.status === 200 && (JSON.parse(answer.text) as { data: { size: number } }).data.size === seeded.events) break;
    if (performance.now() - treeStarted > 3_600_000) throw new Error(`the tree was not built within an hour: ${answer.text}`);
    await sleep(500);
  }
  const treeSeconds = (performance.now() - treeStarted) / 1000;
  out(
    `tree built and signed at size ${integer.format(seeded.events)} in ${fixed(treeSeconds, 1)} s from the service's start (${integer.format(seeded.events / treeSeconds)} events/s)`,
  );
  const proof = (index: number) => post(target, 'get_workspace_proof', { id: workspaceIds[index % workspaceIds.length] });
  await sequential(20, proof);
  const proofs = await sequential(requests, (index) => proof(index + 20));
  out(
    `get_workspace_proof, ${requests} records one after another: p50 ${fixed(percentile(proofs, 50))} ms, p99 ${fixed(percentile(proofs, 99))} ms`,
  );

  // 3. audit:verify over the log.
  const verifyStarted = performance.now();
  const verified = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/audit-verify.ts'], {
      env: { ...process.env, DATABASE_URL: logUrl, EVENTSTORE_URL: '', LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let [stdout, stderr] = ['', ''];
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
  const verifySeconds = (performance.now() - verifyStarted) / 1000;
  const checked = Number(/\((\d+) events/.exec(verified.stdout)?.[1] ?? NaN);
  out(
    `\n3. npm run audit:verify: exit ${verified.code}, "${verified.stdout.trim().split('\n').at(-1)}"${verified.stderr ? ` ${verified.stderr.trim()}` : ''}`,
  );
  out(`   ${fixed(verifySeconds, 1)} s, start-up included: ${integer.format(checked / verifySeconds)} events/s`);

  // 4. diff_workspace over the last 10 events of a long record and of a short one.
  const seedStarted = performance.now();
  const long = await seedHotRecord(target, logUrl, recordEvents);
  const short = await seedHotRecord(target, logUrl, 20);
  out(`\n4. seeded records of ${integer.format(recordEvents)} and 20 events in ${fixed((performance.now() - seedStarted) / 1000, 1)} s`);
  // Each record's events occur 1 µs apart from its creation: the 11th last is at created_at + (length - 11) µs.
  const lastTen = (record: { id: string; created_at: string }, length: number) => () =>
    post(target, 'diff_workspace', { id: record.id, from: fromMicros(toMicros(record.created_at) + BigInt(length - 11)) });
  const first = await lastTen(long, recordEvents)();
  const changes = (JSON.parse(first.text) as { data: { changes: unknown[] } }).data.changes.length;
  if (changes !== 10) throw new Error(`the diff held ${changes} changes, not 10`);
  out(`first diff of the long record (folds it whole, keeps its provenance snapshots): ${fixed(first.ms)} ms`);
  await sequential(5, lastTen(short, 20));
  await sequential(5, lastTen(long, recordEvents));
  const latencies = { short: [] as number[], long: [] as number[] };
  for (let round = 0; round < 4; round++) {
    latencies.short.push(...(await sequential(requests / 4, lastTen(short, 20))));
    latencies.long.push(...(await sequential(requests / 4, lastTen(long, recordEvents))));
  }
  const [shortP50, longP50] = [percentile(latencies.short, 50), percentile(latencies.long, 50)];
  out(
    `diff_workspace over the last 10 events, p50: 20-event record ${fixed(shortP50)} ms, ${integer.format(recordEvents)}-event record ${fixed(longP50)} ms, ratio ${fixed(longP50 / shortP50)}x`,
  );
} finally {
  close();
  for (const service of [...services]) await stop(service);
  for (const name of [names.on, names.off]) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await finishBenchDatabase({
    admin,
    name: names.log,
    keep: values.keep,
    embedded,
    out,
    reuse: `audit:verify against it: DATABASE_URL=${databaseUrlOn(serverUrl, names.log)} npm run audit:verify`,
  });
  rmSync(dataDir, { recursive: true, force: true });
}
