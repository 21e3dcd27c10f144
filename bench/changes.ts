/**
 * npm run bench:changes [-- --events 1000000 --organizations 1000 --rate 200 --seconds 15
 *   --rounds 3 --round-seconds 5 --clients 16 --listen both|webhooks|streams --database NAME --keep]
 *
 * The change feed and webhooks (issue 22), in one run against one service process (`src/main.ts`,
 * events in PostgreSQL):
 *
 * 1. `list_changes`, pages of 100, for a caller of one organization among `--organizations`, on a
 *    log of `--events` events: the history bench:rebuild seeds (bench/seeded-history.ts), spread
 *    over that many organizations, written straight into es_events; the service's projector fills
 *    the change table as it catches up. The caller walks its organization's changes, following `next`.
 * 2. At `--rate` creations a second for `--seconds`: the delay from each change (`occurred_at`) to
 *    its arrival at a webhook receiver answering at once, and at an open change stream.
 * 3. `create_workspace` throughput from `--clients` connections, rounds without and with 10 webhooks
 *    and 10 open streams on the organization written to (`--listen`: both, or only one kind),
 *    alternating, `--rounds` of each.
 *
 * PostgreSQL: DATABASE_URL's server when set, else the embedded one on DATA_DIR (default: a
 * directory under the system's temporary directory, kept between runs). The database is dropped
 * afterwards unless --keep; --database NAME reuses (or creates) a named one, with its events.
 */
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { pino } from 'pino';
import { Pool as HttpPool } from 'undici';
import { parseConfig } from '../src/config.js';
import { comparePositions, type GlobalPosition } from '../src/eventstore/port.js';
import { readCheckpoint } from '../src/projections/tables.js';
import { readTreeProgress } from '../src/integrity/adapters/tables.js';
import { openStores } from '../src/runtime/stores.js';
import { startServiceProcess, type ServiceProcess } from '../test/support/service-process.js';
import { openChangeStream, startReceiver, type Receiver } from './change-receivers.js';
import { finishBenchDatabase, openBenchDatabase } from './databases.js';
import { addCpu, cpuPerCreate, cpuSeconds, localPostmaster, type CpuSeconds } from './cpu-ticks.js';
import { percentile } from './statistics.js';
import { breakdown, projectorBatches } from './step-breakdown.js';
import { scrape, type Scrape } from '../test/support/metrics.js';
import { seedPostgresLog } from './seeded-history.js';

const usage =
  'usage: npm run bench:changes -- [--events 1000000] [--organizations 1000] [--rate 200] [--seconds 15] ' +
  '[--rounds 3] [--round-seconds 5] [--clients 16] [--listen both|webhooks|streams] [--database NAME] [--keep]\n';
const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '1000000' },
    organizations: { type: 'string', default: '1000' },
    rate: { type: 'string', default: '200' },
    seconds: { type: 'string', default: '15' },
    rounds: { type: 'string', default: '3' },
    'round-seconds': { type: 'string', default: '5' },
    clients: { type: 'string', default: '16' },
    listen: { type: 'string', default: 'both' },
    database: { type: 'string' },
    keep: { type: 'boolean', default: false },
  },
});
const numbers = ['events', 'organizations', 'rate', 'seconds', 'rounds', 'round-seconds', 'clients'] as const;
const settings = Object.fromEntries(numbers.map((name) => [name, Number(values[name])])) as Record<(typeof numbers)[number], number>;
const listen = values.listen!;
if (numbers.some((name) => !(settings[name] > 0)) || !['both', 'webhooks', 'streams'].includes(listen)) {
  process.stderr.write(usage);
  process.exit(2);
}
const databaseName = values.database ?? `bench_changes_${Date.now()}`;

const logger = pino({ level: process.env.LOG_LEVEL || 'warn' }, pino.destination(2));
const out = (line: string) => process.stdout.write(`${line}\n`);
const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const spread = (values: number[]) =>
  `p50 ${percentile(values, 50).toFixed(1)} ms, p99 ${percentile(values, 99).toFixed(1)} ms, max ${Math.max(...values).toFixed(1)} ms`;

/** The organization whose changes are paged (one of the seeded ones), and those written to live. */
const pagedOrganization = 'org_bench7';
const liveOrganization = 'org_bench_live';
const loadOrganization = 'org_bench_load';
/** Webhooks and streams beside the load in the throughput rounds that have them. */
const webhookCount = listen === 'streams' ? 0 : 10;
const streamCount = listen === 'webhooks' ? 0 : 10;
/** Seconds of creations at `--rate` before the timed ones. */
const warmUpSeconds = 2;

const defaultDataDir = path.join(tmpdir(), 'wsapi-bench-changes');
const { embedded, admin, databaseUrl } = await openBenchDatabase({ name: databaseName, usage, defaultDataDir, logger });
// The schema brought up to date as every process does it (src/runtime/stores.ts).
const stores = await openStores(parseConfig({ DATABASE_URL: databaseUrl }, 'tool'), logger, { poolSize: 2, listen: false });
const { pool } = stores;
/**
 * The postmaster whose CPU the throughput rounds count: the embedded server's, or DATABASE_URL's
 * when it runs on this machine (counted whole: whatever else it serves meanwhile is counted too).
 */
const postmaster = embedded
  ? Number(readFileSync(path.join(process.env.DATA_DIR || defaultDataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0])
  : await localPostmaster(pool);
let service: ServiceProcess | undefined;
let receiver: Receiver | undefined;
try {
  const end = await seed();
  service = await startServiceProcess({ databaseUrl, env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', LOG_LEVEL: 'warn' } });
  const caughtUpMs = await waitFor(end, readCheckpoint);
  out(`projected the log in ${(caughtUpMs / 1000).toFixed(1)} s (the change table filled by the projector)`);
  // The integrity trees follow the projection (they wait while it catches up): measured before
  // they have read the seeded log, the parts below would measure the seeding's aftermath.
  const treeMs = await waitFor(end, readTreeProgress);
  out(`grew the integrity trees ${(treeMs / 1000).toFixed(1)} s after that`);
  receiver = await startReceiver();
  const http = new HttpPool(service.url, { connections: settings.clients + 4 });
  out(`event store PostgreSQL; ${process.env.DATABASE_URL ? 'DATABASE_URL' : 'embedded PostgreSQL'}, database ${databaseName}`);
  // Each figure as soon as it is measured: a later part that fails does not take it along.
  const show = (name: string, value: string) => out(`${name.padEnd(52)}  ${value}`);
  show('list_changes, page of 100, one organization', await pageChanges(service, http));
  for (const [name, value] of await deliveryDelays(service, http, receiver)) show(name, value);
  show(`create_workspace with ${webhookCount} webhooks and ${streamCount} streams`, await throughput(service, http, receiver));
  await http.close();
} catch (error) {
  if (service) process.stderr.write(`service output:\n${service.output()}\n`);
  throw error;
} finally {
  // SIGTERM, not SIGKILL: a service run with SERVICE_NODE_ARGS=--cpu-prof writes its profile as it exits.
  await service?.signal('SIGTERM');
  await receiver?.close();
  await stores.close();
  await finishBenchDatabase({ admin, name: databaseName, keep: Boolean(values.keep || values.database), embedded, out });
}
process.exit(0);

/** The seeded log (unless the database has one): its last position. */
async function seed(): Promise<GlobalPosition> {
  const present = Number((await pool.query<{ n: string }>('SELECT count(*) AS n FROM es_events')).rows[0]!.n);
  if (present === 0) {
    const seeder = new pg.Client({ connectionString: databaseUrl });
    await seeder.connect();
    try {
      const seeded = await seedPostgresLog(seeder, settings.events, settings.organizations);
      out(
        `seeded ${integer.format(seeded.events)} events in ${integer.format(seeded.streams)} streams, ` +
          `${integer.format(settings.organizations)} organizations, in ${seeded.seconds.toFixed(1)} s`,
      );
    } finally {
      await seeder.end();
    }
  } else {
    out(`using the ${integer.format(present)} events already in ${databaseName}`);
  }
  const { rows } = await pool.query<{ commit: string; prepare: string }>(
    'SELECT transaction_id::text AS commit, position AS prepare FROM es_events ORDER BY transaction_id DESC, position DESC LIMIT 1',
  );
  return { commit: BigInt(rows[0]!.commit), prepare: BigInt(rows[0]!.prepare) };
}

/** Milliseconds until the position `reach` reads is at `end` or past it (the projection's checkpoint, the trees' progress). */
async function waitFor(end: GlobalPosition, reach: (database: typeof pool) => Promise<GlobalPosition>): Promise<number> {
  const started = performance.now();
  while (comparePositions(await reach(pool), end) < 0) {
    if (performance.now() - started > 1_800_000) throw new Error('the log was not read to its end within 30 minutes');
    await sleep(100);
  }
  return performance.now() - started;
}

type Answer<T> = { data: T; ms: number };
type ChangePage = { items: unknown[]; next: string; has_more: boolean };
type Created = { id: string };

async function call<T = unknown>(http: HttpPool, token: string, query: string, params: unknown): Promise<Answer<T>> {
  const started = performance.now();
  const response = await http.request({
    path: '/api',
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, params }),
  });
  const body = (await response.body.json()) as { data: T };
  const ms = performance.now() - started;
  if (response.statusCode !== 200) throw new Error(`${query} answered ${response.statusCode}: ${JSON.stringify(body)}`);
  return { data: body.data, ms };
}

/** Walks the organization's changes in pages of 100, over and over (the first walk warms up): each page's time. */
async function pageChanges(target: ServiceProcess, http: HttpPool): Promise<string> {
  const token = await target.token([pagedOrganization], 'bench-pager');
  const times: number[] = [];
  let items = 0;
  for (let walk = 0; walk === 0 || times.length < 300; walk++) {
    let after: string | undefined;
    for (;;) {
      const page = await call<ChangePage>(http, token, 'list_changes', { limit: 100, ...(after ? { after } : {}) });
      if (walk > 0) times.push(page.ms);
      else items += page.data.items.length;
      after = page.data.next;
      if (!page.data.has_more) break;
    }
  }
  return `${spread(times)} (${times.length} pages; the organization has ${integer.format(items)} of the log's changes)`;
}

/**
 * Creations at a steady rate, with a webhook to the receiver and an open stream on their
 * organization: each change's delay to both, and how many of the changes each saw.
 */
async function deliveryDelays(target: ServiceProcess, http: HttpPool, at: Receiver): Promise<[string, string][]> {
  const token = await target.token([liveOrganization], 'bench-writer');
  const hook = (await call<Created>(http, token, 'create_webhook', { organization_id: liveOrganization, url: `${at.url}/live` })).data;
  const toLive = () => at.received.filter((delivery) => delivery.path === '/live');
  // The service starts its delivery thread with its first webhook (a second or so, once), and its
  // paths run cold at first: the timed changes come after a warm-up at the same rate, so that they
  // measure the steady state, as a service that has been running does.
  await call(http, token, 'create_workspace', { organization_id: liveOrganization, name: 'warm-up' });
  for (let waited = 0; toLive().length === 0 && waited < 30_000; waited += 50) await sleep(50);
  const closing = new AbortController();
  // From the organization's last change: a reused database (--database) holds an earlier run's.
  const after = await lastChange(http, token, liveOrganization);
  const stream = await openChangeStream(target.url, token, { organization_id: liveOrganization, after }, closing.signal);
  const warmUpCount = Math.round(settings.rate * warmUpSeconds);
  const deliveredBefore = toLive().length;
  await writeAtRate(http, token, warmUpCount, 'warm-up');
  const warmedUp = () => toLive().length >= deliveredBefore + warmUpCount && stream.changes.length >= warmUpCount;
  for (let waited = 0; !warmedUp() && waited < 30_000; waited += 50) await sleep(50);
  const count = Math.round(settings.rate * settings.seconds);
  const started = performance.now();
  const answers = await writeAtRate(http, token, count, 'live');
  const sentFor = (performance.now() - started) / 1000;
  const delivered = () => toLive().slice(deliveredBefore + warmUpCount);
  const streamed = () => stream.changes.slice(warmUpCount);
  for (let waited = 0; (delivered().length < count || streamed().length < count) && waited < 30_000; waited += 100) await sleep(100);
  closing.abort();
  await stream.ended;
  await call(http, token, 'delete_webhook', { id: hook.id });
  const rate = `${integer.format(count / sentFor)} changes/s for ${sentFor.toFixed(1)} s`;
  return [
    [`create_workspace during it (${rate})`, spread(answers.map((answer) => answer.ms))],
    ['change -> webhook receiver', `${spread(delivered().map((d) => d.delayMs))} (${delivered().length}/${count} delivered)`],
    ['change -> open stream', `${spread(streamed().map((c) => c.delayMs))} (${streamed().length}/${count} streamed)`],
  ];
}

/** `count` creations in the live organization, sent at `--rate`: their answers. */
async function writeAtRate(http: HttpPool, token: string, count: number, label: string): Promise<Answer<Created>[]> {
  const writes: Promise<Answer<Created>>[] = [];
  const started = performance.now();
  for (let i = 0; i < count; i++) {
    const due = started + (i * 1000) / settings.rate;
    if (due > performance.now()) await sleep(due - performance.now());
    writes.push(call<Created>(http, token, 'create_workspace', { organization_id: liveOrganization, name: `${label} ${i}` }));
  }
  return Promise.all(writes);
}

/** CPU seconds so far of the service, its PostgreSQL server (when on this machine) and this process (the receiver, the streams' readers, the clients). */
function cpuOf(target: ServiceProcess): CpuSeconds {
  return cpuSeconds(target.pid, postmaster);
}

/** CPU milliseconds per create in each part, from two readings of cpuOf. */
function cpuBetween(before: CpuSeconds, after: CpuSeconds, made: number): string {
  const spent: CpuSeconds = { service: 0, postgres: 0, bench: 0 };
  addCpu(spent, before, after);
  return cpuPerCreate(spent, made);
}

/** Where a create's time went between two scrapes (ms per create by step), and the projector's batches. */
function steps(before: Scrape, after: Scrape): string {
  return `${breakdown('create_workspace', before, after)}; ${projectorBatches(before, after)}`;
}

/** Creations from `--clients` connections for a round's seconds: the rate. */
async function createsPerSecond(http: HttpPool, token: string): Promise<{ rate: number; made: number }> {
  const until = performance.now() + settings['round-seconds'] * 1000;
  let made = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: settings.clients }, async () => {
      while (performance.now() < until) {
        await call(http, token, 'create_workspace', { organization_id: loadOrganization, name: `load ${made}` });
        made += 1;
      }
    }),
  );
  return { rate: made / ((performance.now() - started) / 1000), made };
}

/**
 * Rounds without and with 10 webhooks (to the receiver, answering at once) and 10 open streams on
 * the organization written to, alternating. A round with them lets their deliveries finish before
 * the next round, whose load they would otherwise share.
 */
async function throughput(target: ServiceProcess, http: HttpPool, at: Receiver): Promise<string> {
  const token = await target.token([loadOrganization], 'bench-loader');
  await createsPerSecond(http, token);
  const without: number[] = [];
  const withListeners: number[] = [];
  for (let round = 0; round < settings.rounds; round++) {
    const beforeWithout = cpuOf(target);
    const stepsBeforeWithout = await scrape(`${target.url}/metrics`);
    const alone = await createsPerSecond(http, token);
    without.push(alone.rate);
    const stepsWithout = steps(stepsBeforeWithout, await scrape(`${target.url}/metrics`));
    const cpuWithout = cpuBetween(beforeWithout, cpuOf(target), alone.made);
    const hooks: Created[] = [];
    for (let i = 0; i < webhookCount; i++) {
      hooks.push(
        (await call<Created>(http, token, 'create_webhook', { organization_id: loadOrganization, url: `${at.url}/load-${round}-${i}` }))
          .data,
      );
    }
    const closing = new AbortController();
    const after = await lastChange(http, token, loadOrganization);
    const streams = await Promise.all(
      Array.from({ length: streamCount }, async (_, i) =>
        openChangeStream(
          target.url,
          await target.token([loadOrganization], `bench-streamer-${i}`),
          { organization_id: loadOrganization, after },
          closing.signal,
        ),
      ),
    );
    const beforeWith = cpuOf(target);
    const stepsBeforeWith = await scrape(`${target.url}/metrics`);
    const { rate, made } = await createsPerSecond(http, token);
    withListeners.push(rate);
    const stepsWith = steps(stepsBeforeWith, await scrape(`${target.url}/metrics`));
    const deliveredThisRound = () => at.received.filter((delivery) => delivery.path.startsWith(`/load-${round}-`)).length;
    const repeatsThisRound = () => {
      const paths = at.received.filter((delivery) => delivery.path.startsWith(`/load-${round}-`));
      return paths.length - new Set(paths.map((delivery) => `${delivery.path} ${delivery.webhookId}`)).size;
    };
    const streamedThisRound = () => streams.reduce((sum, stream) => sum + stream.changes.length, 0);
    const behind = () => deliveredThisRound() < made * webhookCount || streamedThisRound() < made * streamCount;
    for (let waited = 0; behind() && waited < 60_000; waited += 100) await sleep(100);
    // Counted until every delivery and streamed change arrived: what the creates cost with them, all told.
    const cpuWith = cpuBetween(beforeWith, cpuOf(target), made);
    closing.abort();
    await Promise.all(streams.map((stream) => stream.ended));
    for (const hook of hooks) await call(http, token, 'delete_webhook', { id: hook.id });
    out(
      `round ${round + 1}: ${integer.format(without[round]!)} creates/s without, ${integer.format(rate)} with ` +
        `(${deliveredThisRound()}/${made * webhookCount} delivered, ${repeatsThisRound()} of them repeats; ` +
        `${streamedThisRound()}/${made * streamCount} streamed)`,
    );
    out(`  without: ${cpuWithout}; ${stepsWithout}`);
    out(`  with:    ${cpuWith}; ${stepsWith}`);
  }
  const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
  const ratios = withListeners.map((rate, round) => (rate / without[round]!).toFixed(2));
  return (
    `${(mean(withListeners) / mean(without)).toFixed(2)}x (${integer.format(mean(withListeners))} against ` +
    `${integer.format(mean(without))} creates/s; rounds ${ratios.join(', ')}; ${settings.clients} connections)`
  );
}

/** The cursor of the organization's last change: a stream opened from it carries only what comes next. */
async function lastChange(http: HttpPool, token: string, organization: string): Promise<string | undefined> {
  let after: string | undefined;
  for (;;) {
    const page = (
      await call<ChangePage>(http, token, 'list_changes', { organization_id: organization, limit: 1000, ...(after ? { after } : {}) })
    ).data;
    after = page.next;
    if (!page.has_more) return after;
  }
}
