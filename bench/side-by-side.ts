/**
 * The service against the plain-CRUD baseline (bench/crud-baseline.ts), side by side on one
 * PostgreSQL: each in its own process and database, the same load from this process over 32
 * keep-alive connections, the two alternating round by round so that the machine's noise falls on
 * both alike. Prints per scenario both throughputs, both p50 and p99, and the ratio. Last, the
 * service alone: creates on one instance against creates spread over two instances on its one
 * database (one of them projecting), with their throughput, p50/p99 and projection lag.
 *
 * Then the hot-record scenario (bench/hot-record.ts): a record of `--hot-events` events against a
 * new one.
 *
 *   npm run bench -- [--seconds 5] [--rounds 3] [--connections 32] [--hot-events 100000]
 *                    [--parts crud,two-instances,hot-record]
 *
 * `--parts` runs only the parts named: the side by side with the baseline, the two instances, the hot record.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { pino } from 'pino';
import { mintToken } from '../src/api/tokens.js';
import { freePort, startEmbeddedPostgres } from '../src/infra/embedded-postgres.js';
import { databaseUrl as databaseUrlOn } from './databases.js';
import { scrape, total, type Scrape } from '../test/support/metrics.js';
import { breakdown } from './step-breakdown.js';
import { testSecret } from '../test/support/secret.js';
import { hotRecordScenario } from './hot-record.js';
import { percentile } from './statistics.js';
import { startServiceProcess, type ServiceProcess } from '../test/support/service-process.js';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '32' },
    'hot-events': { type: 'string', default: '100000' },
    parts: { type: 'string', default: 'crud,two-instances,hot-record' },
  },
});
const parts = new Set(values.parts!.split(','));
const hotRecordEvents = Number(values['hot-events']);
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const connections = Number(values.connections);
const organization = 'org_bench';

type Target = { name: 'service' | 'baseline'; url: string; token: string; ids: string[] };
type Sample = { count: number; elapsedMs: number; latencies: number[]; failures: number };

const agent = new http.Agent({ keepAlive: true, maxSockets: connections });

function post(target: Target, body: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      `${target.url}/api`,
      {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${target.token}`, 'content-length': Buffer.byteLength(body) },
      },
      (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (text += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, text }));
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}

type Scenario = { name: string; body: (target: Target, index: number) => string; keep?: (target: Target, text: string) => void };

const pick = (ids: string[], index: number) => ids[(index * 7919) % ids.length]!;

const scenarios: Scenario[] = [
  {
    name: 'create_workspace',
    body: (_target, index) =>
      JSON.stringify({
        query: 'create_workspace',
        params: { organization_id: organization, name: `Workspace ${index}`, attributes: { team: `t${index % 50}` } },
      }),
    keep: (target, text) => target.ids.push((JSON.parse(text) as { data: { id: string } }).data.id),
  },
  {
    name: 'update_workspace',
    body: (target, index) =>
      JSON.stringify({
        query: 'update_workspace',
        params: { id: pick(target.ids, index), name: `Renamed ${index}`, attributes: { n: index } },
      }),
  },
  { name: 'get_workspace', body: (target, index) => JSON.stringify({ query: 'get_workspace', params: { id: pick(target.ids, index) } }) },
  { name: 'list_workspaces', body: () => JSON.stringify({ query: 'list_workspaces', params: { page: 1, size: 20 } }) },
];

/**
 * `connections` loops, each sending its next request when the last is answered, for `ms`; the loops
 * are dealt out over `targets` in turn (instances of one service).
 */
async function closedLoop(targets: Target[], scenario: Scenario, ms: number, counter: { next: number }): Promise<Sample> {
  const latencies: number[] = [];
  let failures = 0;
  const started = performance.now();
  const deadline = started + ms;
  await Promise.all(
    Array.from({ length: connections }, async (_, loop) => {
      const target = targets[loop % targets.length]!;
      while (performance.now() < deadline) {
        const index = counter.next++;
        const sent = performance.now();
        const { status, text } = await post(target, scenario.body(target, index));
        latencies.push(performance.now() - sent);
        if (status !== 200) failures += 1;
        else scenario.keep?.(target, text);
      }
    }),
  );
  return { count: latencies.length, elapsedMs: performance.now() - started, latencies, failures };
}

/** Requests at a fixed rate, whatever the answers do (latency at a given load, not at saturation). */
async function openLoop(target: Target, scenario: Scenario, perSecond: number, ms: number, counter: { next: number }): Promise<Sample> {
  const latencies: number[] = [];
  let failures = 0;
  const started = performance.now();
  const total = Math.floor((perSecond * ms) / 1000);
  const inFlight: Promise<void>[] = [];
  for (let i = 0; i < total; i++) {
    const due = started + (i * 1000) / perSecond;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const index = counter.next++;
    inFlight.push(
      post(target, scenario.body(target, index)).then(({ status, text }) => {
        // From when it was due: time spent queued behind a slow answer counts (no coordinated omission).
        latencies.push(performance.now() - due);
        if (status !== 200) failures += 1;
        else scenario.keep?.(target, text);
      }),
    );
  }
  await Promise.all(inFlight);
  return { count: latencies.length, elapsedMs: performance.now() - started, latencies, failures };
}

const metricsOf = (target: Target) => scrape(`${target.url}/metrics`);
/**
 * The smallest bucket bound under which `q` of the projection waits fell, as "≤ N ms": those
 * between each pair of scrapes (before, after), of one instance or several, taken together.
 */
function waitQuantile(intervals: [before: Scrape, after: Scrape][], q: number): string {
  const name = 'wsapi_command_step_duration_seconds_bucket';
  const below = (le: string) =>
    intervals.reduce(
      (sum, [before, after]) =>
        sum + total(after, name, { step: 'wait_projection', le }) - total(before, name, { step: 'wait_projection', le }),
      0,
    );
  const bounds = (intervals[0]![1].series.get(name)?.metrics ?? [])
    .filter((sample) => sample.labels?.step === 'wait_projection')
    .map((sample) => sample.labels!.le!)
    .sort((a, b) => Number(a) - Number(b));
  const bound = bounds.find((le) => below(le) >= q * below('+Inf'));
  return bound === undefined || bound === '+Inf' ? 'over the largest bucket' : `≤ ${Number(bound) * 1000} ms`;
}

const merge = (samples: Sample[]): Sample => ({
  count: samples.reduce((sum, s) => sum + s.count, 0),
  elapsedMs: samples.reduce((sum, s) => sum + s.elapsedMs, 0),
  latencies: samples.flatMap((s) => s.latencies),
  failures: samples.reduce((sum, s) => sum + s.failures, 0),
});
const throughput = (sample: Sample) => (sample.count * 1000) / sample.elapsedMs;
const fmt = (n: number, digits = 1) => n.toFixed(digits).padStart(8);

/** Runs `statements(name)` for each of the names, on the server `adminUrl` names. */
async function onEachDatabase(adminUrl: string, names: string[], statements: (name: string) => string[]): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    for (const name of names) for (const statement of statements(name)) await admin.query(statement);
  } finally {
    await admin.end();
  }
}

const dropStatement = (name: string) => `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`;

async function createDatabases(adminUrl: string, names: string[]): Promise<string[]> {
  await onEachDatabase(adminUrl, names, (name) => [dropStatement(name), `CREATE DATABASE ${name}`]);
  return names.map((name) => databaseUrlOn(adminUrl, name));
}

async function startBaselineProcess(databaseUrl: string): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', 'bench/crud-baseline.ts'], {
    env: { ...process.env, DATABASE_URL: databaseUrl, AUTH_JWT_SECRET: testSecret, PORT: String(port) },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  for (let attempt = 0; ; attempt++) {
    const up = await fetch(`${url}/api`, { method: 'POST' }).then(
      () => true,
      () => false,
    );
    if (up) return { url, child };
    if (attempt > 300 || child.exitCode !== null) throw new Error('the baseline did not start');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const logger = pino({ level: 'warn' });
const dataDir = mkdtempSync(path.join(tmpdir(), 'wsapi-bench-'));
const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres(dataDir, logger);
const adminUrl = process.env.DATABASE_URL ?? embedded!.url;
const benchDatabases = ['bench_service', 'bench_crud'];
const [serviceDatabase, baselineDatabase] = await createDatabases(adminUrl, benchDatabases);
/** A start that fails (a service that does not answer in time, on a loaded machine) leaves no embedded PostgreSQL running. */
const abandon = async (error: unknown): Promise<never> => {
  await embedded?.stop();
  rmSync(dataDir, { recursive: true, force: true });
  throw error;
};
const service = await startServiceProcess({ databaseUrl: serviceDatabase!, env: { LOG_LEVEL: 'warn' } }).catch(abandon);
const baseline = await startBaselineProcess(baselineDatabase!).catch(async (error: unknown) => {
  await service.signal('SIGTERM');
  return abandon(error);
});
const token = await mintToken(testSecret, { subject: 'bench', organizations: [organization], expiresIn: '2h' });
const targets: Target[] = [
  { name: 'service', url: service.url, token, ids: [] },
  { name: 'baseline', url: baseline.url, token, ids: [] },
];
/** The service's second instance, for the last scenario. */
let second: ServiceProcess | undefined;

try {
  if (parts.has('crud')) await sideBySide();
  if (parts.has('two-instances')) {
    second = await startServiceProcess({ databaseUrl: serviceDatabase!, env: { LOG_LEVEL: 'warn' } });
    await twoInstances(second);
    await second.signal('SIGTERM');
    second = undefined;
  }
  // Last, a record with a long history against a new one (bench/hot-record.ts), on the first instance.
  if (parts.has('hot-record'))
    await hotRecordScenario({ url: service.url, databaseUrl: serviceDatabase!, events: hotRecordEvents, seconds });
} finally {
  agent.destroy();
  await second?.signal('SIGTERM');
  await service.signal('SIGTERM');
  baseline.child.kill('SIGTERM');
  // On DATABASE_URL's server the databases would outlive the run; an embedded server's go with its directory.
  // FORCE ends whatever connection a process on its way out still holds.
  if (!embedded) await onEachDatabase(adminUrl, benchDatabases, (name) => [dropStatement(name)]);
  await embedded?.stop();
  rmSync(dataDir, { recursive: true, force: true });
}

async function sideBySide(): Promise<void> {
  console.log(
    `side by side: ${connections} connections, ${rounds} alternating rounds of ${seconds} s per scenario and side; ` +
      `PostgreSQL ${process.env.DATABASE_URL ? 'DATABASE_URL' : 'embedded'}; LOG_LEVEL=warn on the service`,
  );
  console.log(
    `${'scenario'.padEnd(22)}${'service/s'.padStart(10)}${'crud/s'.padStart(10)}${'ratio'.padStart(8)}   p50 / p99 ms service     p50 / p99 ms crud`,
  );
  const measured = new Map<string, Record<Target['name'], Sample>>();
  const stepLines: string[] = [];
  for (const scenario of scenarios) {
    const counters = { service: { next: 0 }, baseline: { next: 0 } };
    // Warm-up, not counted: connections, JIT, caches.
    for (const target of targets) await closedLoop([target], scenario, 1000, counters[target.name]);
    const samples: Record<Target['name'], Sample[]> = { service: [], baseline: [] };
    const before = await metricsOf(targets[0]!);
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? targets : [...targets].reverse();
      for (const target of order) samples[target.name].push(await closedLoop([target], scenario, seconds * 1000, counters[target.name]));
    }
    const result = { service: merge(samples.service), baseline: merge(samples.baseline) };
    measured.set(scenario.name, result);
    report(scenario.name, result);
    const spent = breakdown(scenario.name, before, await metricsOf(targets[0]!));
    if (spent) stepLines.push(`  ${scenario.name}: ${spent}`);
  }

  // Commands at 70 % of the service's own maximum create rate, on both: latency under load, not at saturation.
  const rate = 0.7 * throughput(measured.get('create_workspace')!.service);
  const atRate = { service: [] as Sample[], baseline: [] as Sample[] };
  const counters = { service: { next: 1e9 }, baseline: { next: 1e9 } };
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? targets : [...targets].reverse();
    for (const target of order)
      atRate[target.name].push(await openLoop(target, scenarios[0]!, rate, seconds * 1000, counters[target.name]));
  }
  report(`create at ${Math.round(rate)}/s`, { service: merge(atRate.service), baseline: merge(atRate.baseline) }, true);
  // Projection lag at half the service's maximum create rate: how long commands waited for the
  // projector to apply their events (commit to applied), from the service's step histogram. As
  // for the scenarios above: a warm-up not counted (the machine coming off the load before), then
  // as long as each side ran per scenario, so that one passing stall weighs as much as it does there.
  const halfLoad = 0.5 * throughput(measured.get('create_workspace')!.service);
  const lagCounter = { next: 2e9 };
  await openLoop(targets[0]!, scenarios[0]!, halfLoad, 1000, lagCounter);
  const lagBefore = await metricsOf(targets[0]!);
  await openLoop(targets[0]!, scenarios[0]!, halfLoad, rounds * seconds * 1000, lagCounter);
  const lagAfter = await metricsOf(targets[0]!);
  console.log(
    `projection lag at ${Math.round(halfLoad)} creates/s for ${rounds * seconds} s: p50 ${waitQuantile([[lagBefore, lagAfter]], 0.5)}, ` +
      `p99 ${waitQuantile([[lagBefore, lagAfter]], 0.99)} (commit to applied, as commands waited for it; histogram bucket bounds)`,
  );
  console.log(
    `service RSS at the end: ${(total(lagAfter, 'wsapi_process_resident_memory_bytes') / 2 ** 20).toFixed(0)} MiB, after ${targets[0]!.ids.length} creations and every request above`,
  );
  console.log('where a service command spends its time, mean ms per command (from its /metrics):');
  for (const line of stepLines) console.log(line);
}

async function twoInstances(secondInstance: ServiceProcess): Promise<void> {
  // Two instances of the service on its one database, as deployed for availability: the first,
  // started first, holds the projector; the second only serves, and its commands wait for the
  // first's notifications. Creates from every connection to the first alone, then from the
  // connections split between both, the two alternating round by round; the lag is every
  // instance's projection waits over the rounds it took load in.
  const instances: Target[] = [targets[0]!, { name: 'service', url: secondInstance.url, token, ids: [] }];
  const setups = [
    { name: 'one instance', targets: instances.slice(0, 1), samples: [] as Sample[], intervals: [] as [Scrape, Scrape][] },
    { name: 'two instances', targets: instances, samples: [] as Sample[], intervals: [] as [Scrape, Scrape][] },
  ];
  const setupCounter = { next: 3e9 };
  for (const setup of setups) await closedLoop(setup.targets, scenarios[0]!, 1000, setupCounter);
  const instancesBefore = await Promise.all(instances.map(metricsOf));
  for (let round = 0; round < rounds; round++) {
    for (const setup of round % 2 === 0 ? setups : [...setups].reverse()) {
      const before = await Promise.all(setup.targets.map(metricsOf));
      setup.samples.push(await closedLoop(setup.targets, scenarios[0]!, seconds * 1000, setupCounter));
      const after = await Promise.all(setup.targets.map(metricsOf));
      setup.intervals.push(...before.map((scrape, index): [Scrape, Scrape] => [scrape, after[index]!]));
    }
  }
  const instancesAfter = await Promise.all(instances.map(metricsOf));
  const projectedOn = instances
    .map((_, index) => index)
    .filter(
      (index) =>
        total(instancesAfter[index]!, 'wsapi_projector_batch_events_count') -
          total(instancesBefore[index]!, 'wsapi_projector_batch_events_count') >
        0,
    )
    .map((index) => `instance ${index + 1}`);
  console.log(
    `two instances on one database: create_workspace from ${connections} connections (split between the instances when two), ` +
      `${rounds} alternating rounds of ${seconds} s per setup`,
  );
  console.log(
    `${'setup'.padEnd(22)}${'creates/s'.padStart(10)}   p50 / p99 ms      projection lag p50 / p99 (commit to applied, as commands waited for it)`,
  );
  for (const setup of setups) {
    const sample = merge(setup.samples);
    const failures = sample.failures > 0 ? `  (failures: ${sample.failures})` : '';
    console.log(
      `${setup.name.padEnd(22)}${fmt(throughput(sample), 0).padStart(10)}  ${fmt(percentile(sample.latencies, 50), 2)} /${fmt(percentile(sample.latencies, 99), 2)}` +
        `   ${waitQuantile(setup.intervals, 0.5)} / ${waitQuantile(setup.intervals, 0.99)}${failures}`,
    );
  }
  // Which instance's commands waited longer: the second's wait also takes the first's notification.
  const [, both] = setups;
  const lagOf = (index: number) => both!.intervals.filter((_, interval) => interval % instances.length === index);
  console.log(
    `projection lag p50 / p99 in the two-instance rounds, by instance: ` +
      instances
        .map((_, index) => `instance ${index + 1} ${waitQuantile(lagOf(index), 0.5)} / ${waitQuantile(lagOf(index), 0.99)}`)
        .join(', '),
  );
  const [one, two] = setups.map((setup) => throughput(merge(setup.samples)));
  console.log(
    `two instances / one: ${fmt(two! / one!, 2).trim()}x the creates/s; projector batches applied by ${projectedOn.join(' and ') || 'neither instance'}`,
  );
}

function report(name: string, result: Record<Target['name'], Sample>, latencyRatio = false): void {
  const [s, b] = [result.service, result.baseline];
  const ratio = latencyRatio ? percentile(s.latencies, 99) / percentile(b.latencies, 99) : throughput(s) / throughput(b);
  const failures = s.failures + b.failures > 0 ? `  (failures: ${s.failures} service, ${b.failures} crud)` : '';
  console.log(
    `${name.padEnd(22)}${fmt(throughput(s), 0).padStart(10)}${fmt(throughput(b), 0).padStart(10)}${fmt(ratio, 2)}x` +
      `  ${fmt(percentile(s.latencies, 50), 2)} /${fmt(percentile(s.latencies, 99), 2)}  ${fmt(percentile(b.latencies, 50), 2)} /${fmt(percentile(b.latencies, 99), 2)}` +
      `${latencyRatio ? '   (ratio: p99 service / p99 crud)' : ''}${failures}`,
  );
}
