/**
 * A hot record (issue 21): one workspace with many events against one with a single event, on one
 * service instance, side by side: keyed update_workspace, a history page, get_workspace with
 * as_of in the middle of the history, and twenty concurrent writers of the one record (updates/s,
 * p50/p99, non-200 answers), with get_workspace on other records meanwhile against idle; then two
 * instances, ten writers each, on one record (no non-200 answer, every update in the history once).
 *
 * The long history is appended through the service's own event-store adapter (WorkspaceUpdated
 * events decided by the real decider, 1,000 to an append), then projected by the service; its
 * snapshots are made by the first reads that pass them, which the warm-up does.
 *
 * Part of `npm run bench` (bench/side-by-side.ts runs it last, on its service); alone:
 *
 *   npm run bench:hot-record -- [--events 100000] [--seconds 5] [--keep]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { pino } from 'pino';
import { mintToken } from '../src/api/tokens.js';
import { parseConfig } from '../src/config.js';
import { workspaceDecider } from '../src/domain/deciders.js';
import { fromMicros, toMicros } from '../src/domain/timestamp.js';
import { hashAppended } from '../src/integrity/hashes.js';
import { readTreeProgress } from '../src/integrity/adapters/tables.js';
import { comparePositions } from '../src/eventstore/port.js';
import { workspaceStream } from '../src/eventstore/stream-names.js';
import { startEmbeddedPostgres } from '../src/infra/embedded-postgres.js';
import { openStores } from '../src/runtime/stores.js';
import { loadState } from '../src/write/execute.js';
import { scrape } from '../test/support/metrics.js';
import { startServiceProcess } from '../test/support/service-process.js';
import { testSecret } from '../test/support/secret.js';
import { databaseUrl as databaseUrlOn } from './databases.js';
import { apiClient, type Target } from './http.js';
import { percentile } from './statistics.js';
import { breakdown, projectorBatches } from './step-breakdown.js';

export const organization = 'org_bench_hot';
const writers = 20;

type Service = Target;

const { post, sequential, close } = apiClient(64);

async function ok<T>(service: Service, query: string, params: unknown): Promise<T> {
  const answer = await post(service, query, params);
  if (answer.status !== 200) throw new Error(`${query} answered ${answer.status}: ${answer.text}`);
  return (JSON.parse(answer.text) as { data: T }).data;
}

type Workspace = { id: string; name: string; created_at: string; updated_at: string };

/** Appends `count - 1` updates to a new workspace through the adapter, 1,000 to an append; resolves with it once projected. */
export async function seedHotRecord(service: Service, databaseUrl: string, count: number): Promise<Workspace> {
  const created = await ok<Workspace>(service, 'create_workspace', { organization_id: organization, name: 'hot' });
  const logger = pino({ level: 'warn' });
  const stores = await openStores(parseConfig({ DATABASE_URL: databaseUrl }, 'tool'), logger, { poolSize: 2, listen: false });
  try {
    const streamName = workspaceStream(created.id);
    let { state, head } = await loadState(stores.store, streamName, workspaceDecider);
    let { hash } = head;
    for (let seeded = 1; seeded < count;) {
      const events = [];
      for (; seeded < count && events.length < 1000; seeded++) {
        // `now` stays at the creation: each update then occurs 1 µs after the one before.
        const context = { actor: 'bench', requestId: `seed-${seeded}`, now: created.created_at };
        const [event] = workspaceDecider.decide(
          { type: 'UpdateWorkspace', id: created.id, name: `hot ${seeded}`, attributes: { n: seeded }, context },
          state,
        );
        state = workspaceDecider.evolve(state, event!);
        const version = head.version + BigInt(events.length) + 1n;
        const [hashes] = hashAppended([{ ...event!, streamName, version }], hash);
        hash = hashes!.hash;
        events.push({ id: crypto.randomUUID(), type: event!.type, data: event!.data, metadata: { ...event!.metadata, ...hashes } });
      }
      await stores.store.append(streamName, head.version, events);
      head = { version: head.version + BigInt(events.length), hash };
    }
    const end = (await stores.store.readLastPosition())!;
    const lastName = `hot ${count - 1}`;
    let projected: Workspace | undefined;
    await pollUntil('the seeded history was not projected', async () => {
      projected = await ok<Workspace>(service, 'get_workspace', { id: created.id });
      return projected.name === lastName || count === 1;
    });
    // The integrity trees follow the projection: measured before they have read the seeded
    // history, the scenario would measure the seeding's aftermath.
    await pollUntil(
      'the integrity trees did not read the seeded history',
      async () => comparePositions(await readTreeProgress(stores.pool), end) >= 0,
    );
    return projected!;
  } finally {
    await stores.close();
  }
}

/** Polls `condition` every 200 ms until it holds; fails with `failure` after 10 minutes. */
async function pollUntil(failure: string, condition: () => Promise<boolean>): Promise<void> {
  for (let waited = 0; !(await condition()); waited += 200) {
    if (waited > 600_000) throw new Error(`${failure} within 10 minutes`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

type Storm = { perSecond: number; latencies: number[]; failures: number; statuses: Set<number> };

/** `writers` connections updating `id` for `ms`, each adding attribute keys of its own, spread over `services` in turn. */
async function storm(services: Service[], id: string, ms: number): Promise<Storm> {
  const latencies: number[] = [];
  const statuses = new Set<number>();
  let failures = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: writers }, async (_, writer) => {
      const service = services[writer % services.length]!;
      for (let n = 0; performance.now() - started < ms; n++) {
        const answer = await post(service, 'update_workspace', { id, name: `writer ${writer}`, attributes: { [`w${writer}`]: n } });
        latencies.push(answer.ms);
        if (answer.status !== 200) {
          failures += 1;
          statuses.add(answer.status);
        }
      }
    }),
  );
  return { perSecond: (latencies.length * 1000) / (performance.now() - started), latencies, failures, statuses };
}

/** get_workspace on `ids` in turn from one connection until `done`; its latencies. */
async function readOthers(service: Service, ids: string[], done: () => boolean): Promise<number[]> {
  const latencies: number[] = [];
  for (let index = 0; !done(); index++) {
    const answer = await post(service, 'get_workspace', { id: ids[index % ids.length] });
    if (answer.status !== 200) throw new Error(`get_workspace answered ${answer.status}`);
    latencies.push(answer.ms);
  }
  return latencies;
}

const p50 = (values: number[]) => percentile(values, 50);
const fixed = (value: number, digits = 2) => value.toFixed(digits);

/** Runs the scenario against a running service on `databaseUrl` (events in PostgreSQL) and prints its table. */
export async function hotRecordScenario(options: { url: string; databaseUrl: string; events: number; seconds: number }): Promise<void> {
  try {
    await runScenario(options);
  } finally {
    close();
  }
}

async function runScenario(options: { url: string; databaseUrl: string; events: number; seconds: number }): Promise<void> {
  const token = await mintToken(testSecret, { subject: 'bench-hot', organizations: [organization], expiresIn: '2h' });
  const service: Service = { url: options.url, token };
  const seedStarted = performance.now();
  const hot = await seedHotRecord(service, options.databaseUrl, options.events);
  const seededIn = (performance.now() - seedStarted) / 1000;
  const fresh = await ok<Workspace>(service, 'create_workspace', { organization_id: organization, name: 'new' });
  const others = await Promise.all(
    Array.from({ length: 20 }, (_, n) => ok<Workspace>(service, 'create_workspace', { organization_id: organization, name: `other ${n}` })),
  );
  const middle = fromMicros(toMicros(hot.created_at) + BigInt(Math.floor(options.events / 2)));
  const lastPage = Math.max(1, Math.ceil(options.events / 100));
  const requests = 200;
  const keyedRequests = 20;

  const keyed = (id: string) => (index: number) =>
    post(service, 'update_workspace', { id, name: `keyed ${index}` }, { 'idempotency-key': `${id}-${Date.now()}-${index}` });
  const history = (id: string, page: number) => () => post(service, 'get_workspace_history', { id, page, size: 100 });
  const asOf = (id: string, at: string) => () => post(service, 'get_workspace', { id, as_of: at });

  // Warm-up, not counted: the first reads of the long history make its snapshots, the first keyed
  // update reads the events its instance has not seen (appended by the seeding) and indexes them.
  for (const id of [hot.id, fresh.id]) await sequential(3, keyed(id));
  await sequential(5, asOf(hot.id, middle));
  await sequential(5, history(hot.id, lastPage));

  const rows: [string, number, number][] = [];
  rows.push([
    'keyed update_workspace, p50 ms',
    p50(await sequential(keyedRequests, keyed(fresh.id))),
    p50(await sequential(keyedRequests, keyed(hot.id))),
  ]);
  rows.push([
    `history page ${lastPage} (size 100) vs page 1, p50 ms`,
    p50(await sequential(requests, history(hot.id, 1))),
    p50(await sequential(requests, history(hot.id, lastPage))),
  ]);
  rows.push([
    'get_workspace as_of (middle), p50 ms',
    p50(await sequential(requests, asOf(fresh.id, fresh.created_at))),
    p50(await sequential(requests, asOf(hot.id, middle))),
  ]);

  const idle = await (async () => {
    const until = performance.now() + options.seconds * 1000;
    return readOthers(
      service,
      others.map((other) => other.id),
      () => performance.now() > until,
    );
  })();
  const storms: Storm[] = [];
  const duringStorms: number[][] = [];
  const stormSteps: string[] = [];
  for (const id of [fresh.id, hot.id]) {
    let stormDone = false;
    const reading = readOthers(
      service,
      others.map((other) => other.id),
      () => stormDone,
    );
    const before = await scrape(`${service.url}/metrics`);
    storms.push(await storm([service], id, options.seconds * 1000));
    const after = await scrape(`${service.url}/metrics`);
    stormSteps.push(`${breakdown('update_workspace', before, after)} (${projectorBatches(before, after)})`);
    stormDone = true;
    duringStorms.push(await reading);
  }

  // Two instances, half the writers on each, on one new record: conflicts between them are retried
  // from the events read after the version expected; every update answered 200 must be in the
  // history once, and none answered otherwise.
  const secondInstance = await startServiceProcess({ databaseUrl: options.databaseUrl, env: { LOG_LEVEL: 'warn' } });
  let shared: Storm;
  let sharedHistory: number;
  const sharedRecord = await ok<Workspace>(service, 'create_workspace', { organization_id: organization, name: 'shared' });
  try {
    shared = await storm([service, { url: secondInstance.url, token }], sharedRecord.id, options.seconds * 1000);
    sharedHistory = (await ok<{ total: number }>(service, 'get_workspace_history', { id: sharedRecord.id, page: 1, size: 1 })).total - 1;
  } finally {
    await secondInstance.signal('SIGTERM');
  }

  const left = 'hot record'.padEnd(48);
  console.log(
    `hot record: ${options.events.toLocaleString('en-US')} events (seeded, projected and in the integrity tree in ${fixed(seededIn, 1)} s) against a 1-event record, one instance`,
  );
  console.log(`${left}${'1-event'.padStart(12)}${`${options.events}-event`.padStart(14)}${'ratio'.padStart(9)}`);
  for (const [name, small, large] of rows) {
    console.log(`${name.padEnd(48)}${fixed(small).padStart(12)}${fixed(large).padStart(14)}${`${fixed(large / small)}x`.padStart(9)}`);
  }
  const [small, large] = storms as [Storm, Storm];
  console.log(
    `${`${writers} concurrent writers, updates/s`.padEnd(48)}${fixed(small.perSecond, 0).padStart(12)}${fixed(large.perSecond, 0).padStart(14)}${`${fixed(large.perSecond / small.perSecond)}x`.padStart(9)}`,
  );
  for (const [label, q] of [
    ['p50', 50],
    ['p99', 99],
  ] as const) {
    const a = percentile(small.latencies, q);
    const b = percentile(large.latencies, q);
    console.log(`${`  their ${label} ms`.padEnd(48)}${fixed(a).padStart(12)}${fixed(b).padStart(14)}${`${fixed(b / a)}x`.padStart(9)}`);
  }
  console.log(
    `  where an update's time went, mean ms: on the 1-event record ${stormSteps[0]}; on the ${options.events}-event record ${stormSteps[1]}`,
  );
  const statuses = (storm: Storm) => (storm.failures === 0 ? '0' : `${storm.failures} (${[...storm.statuses].join(', ')})`);
  console.log(`${'  their non-200 answers'.padEnd(48)}${statuses(small).padStart(12)}${statuses(large).padStart(14)}`);
  const idleP99 = percentile(idle, 99);
  console.log(
    `get_workspace on other records, p99 ms: idle ${fixed(idleP99)}, during the storm on the 1-event record ${fixed(percentile(duringStorms[0]!, 99))} ` +
      `(${fixed(percentile(duringStorms[0]!, 99) / idleP99)}x), on the ${options.events}-event record ${fixed(percentile(duringStorms[1]!, 99))} ` +
      `(${fixed(percentile(duringStorms[1]!, 99) / idleP99)}x)`,
  );
  const sharedApplied = shared.latencies.length - shared.failures;
  console.log(
    `two instances, ${writers / 2} writers each on one new record: ${fixed(shared.perSecond, 0)} updates/s, p99 ${fixed(percentile(shared.latencies, 99))} ms, ` +
      `non-200 answers ${statuses(shared)}; ${sharedApplied} answered 200, ${sharedHistory} in the history ` +
      `(${sharedHistory === sharedApplied ? 'each applied once' : 'NOT each applied once'})`,
  );
}

if (import.meta.url === pathToFileURL(process.argv[1]!).href) {
  const { values } = parseArgs({
    options: {
      events: { type: 'string', default: '100000' },
      seconds: { type: 'string', default: '5' },
      keep: { type: 'boolean', default: false },
    },
  });
  const logger = pino({ level: 'warn' });
  const dataDir = mkdtempSync(path.join(tmpdir(), 'wsapi-bench-hot-'));
  const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres(dataDir, logger);
  const serverUrl = process.env.DATABASE_URL ?? embedded!.url;
  const name = `bench_hot_record_${Date.now()}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const databaseUrl = databaseUrlOn(serverUrl, name);
  const service = await startServiceProcess({ databaseUrl, env: { LOG_LEVEL: 'warn' } });
  try {
    console.log(`PostgreSQL ${process.env.DATABASE_URL ? 'DATABASE_URL' : 'embedded'}; events in PostgreSQL`);
    await hotRecordScenario({ url: service.url, databaseUrl, events: Number(values.events), seconds: Number(values.seconds) });
  } finally {
    await service.signal('SIGTERM');
    if (values.keep) console.log(`kept the database ${name}`);
    else await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
    await embedded?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
