/**
 * `npm run soak`: two service processes on one PostgreSQL under mixed load, broken the way an
 * operator would break them, bounded in time, and then checked. What it measures is
 * probabilistic, so it is a command and not a test (the crash tests in test/e2e/crashes.e2e.test.ts
 * and webhook-crash.e2e.test.ts are its deterministic counterparts).
 *
 * Load: clients create, update and delete their own workspaces; a third of the commands carry an
 * Idempotency-Key and are retried with it, on either instance, until they are answered. Two
 * webhooks on the organization deliver every change to a receiver in this process, which counts
 * deliveries per webhook and `webhook-id`.
 * Faults, in turn, every 6 s: `kill -9` of an instance (restarted), `SIGSTOP` of the projector
 * leader for 10 s, every service connection terminated, PostgreSQL unreachable for 5 s (the
 * instances reach it through a TCP proxy that drops their connections and refuses new ones; the
 * server itself, possibly shared, is not restarted), the webhook receiver down for 5 s, and with
 * EventStoreDB the stand-in stopped for 5 s. Then: events doubled by a keyed retry (must be 0),
 * `projections:verify` differences (must be 0), changes never delivered to a webhook (must be 0),
 * deliveries repeated with no crash or lost connection before them (must be 0), and the figures below.
 *
 *   npm run soak -- [--seconds 60] [--event-store postgres|eventstoredb] [--clients 8] [--seed 1]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { pino } from 'pino';
import { encodeCursor } from '../src/changes/cursor.js';
import { EventStoreDBEventStore } from '../src/eventstore/eventstoredb.js';
import { startOfLog, type EventStore } from '../src/eventstore/port.js';
import { PostgresEventStore } from '../src/eventstore/postgres.js';
import { startEmbeddedPostgres } from '../src/infra/embedded-postgres.js';
import { createPool, PgListener } from '../src/infra/postgres.js';
import { actualReadModel, compareReadModels, expectedReadModel } from '../src/projections/verify.js';
import { CuttableProxy } from '../test/support/cuttable-proxy.js';
import { EventStoreDBStandIn } from '../test/support/eventstoredb-standin/index.js';
import { seededRandom } from '../test/support/generate.js';
import { startServiceProcess, type ServiceProcess } from '../test/support/service-process.js';
import { startReceiver } from './change-receivers.js';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '60' },
    'event-store': { type: 'string', default: 'postgres' },
    clients: { type: 'string', default: '8' },
    seed: { type: 'string', default: '1' },
  },
});
const seconds = Number(values.seconds);
const clients = Number(values.clients);
const onEventStoreDB = values['event-store'] === 'eventstoredb';
if (!['postgres', 'eventstoredb'].includes(values['event-store']!) || !(seconds > 0) || !(clients > 0)) {
  process.stderr.write('usage: npm run soak -- [--seconds 60] [--event-store postgres|eventstoredb] [--clients 8] [--seed 1]\n');
  process.exit(2);
}
const random = seededRandom(Number(values.seed));
const org = 'org_soak';
const projectionWaitMs = 5000;
const logger = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// PostgreSQL: DATABASE_URL, or an embedded one of its own; the event store: it, or the stand-in.
const dataDir = mkdtempSync(path.join(tmpdir(), 'wsapi-soak-'));
const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres(dataDir, logger);
const adminUrl = process.env.DATABASE_URL ?? embedded!.url;
const databaseName = `soak_${Date.now()}`;
const admin = new pg.Client({ connectionString: adminUrl });
await admin.connect();
await admin.query(`CREATE DATABASE ${databaseName}`);
await admin.end();
const databaseUrl = Object.assign(new URL(adminUrl), { pathname: `/${databaseName}` }).toString();
const standIn = onEventStoreDB ? await EventStoreDBStandIn.start() : undefined;
// The instances reach PostgreSQL through the proxy; the soak's own checks go straight to it.
const proxy = new CuttableProxy({ host: new URL(adminUrl).hostname, port: Number(new URL(adminUrl).port || 5432) });
await proxy.open();
const where = { databaseUrl: Object.assign(new URL(databaseUrl), { port: String(proxy.port) }).toString(), eventStoreUrl: standIn?.url };
/** An attempt's timeout; its lease is 30 s longer (src/webhooks/adapters/dispatcher.ts). */
const webhookTimeoutMs = 2000;
const env = {
  PROJECTION_WAIT_MS: String(projectionWaitMs),
  WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
  WEBHOOK_TIMEOUT_MS: String(webhookTimeoutMs),
  // Short enough to finish within the soak, long enough (about 3 minutes) to outlast any fault.
  WEBHOOK_RETRY_SCHEDULE: '1s,2s,4s,8s,15s,30s,30s,30s,30s,30s',
};
const startInstance = () => startServiceProcess({ ...where, env });

const instances: ServiceProcess[] = [await startInstance()];
instances.push(await startInstance());
const token = await instances[0]!.token([org], 'soak-client');
const database = new pg.Pool({ connectionString: databaseUrl, max: 2 });
const receiver = await startReceiver();
const webhookPaths = ['/first', '/second'];

/**
 * Each process's freezes and thaws so far: odd while it is frozen. A call to a process frozen at
 * any time during the call waits for the process, not for the service, and is not counted as a wait.
 */
const freezesAndThaws = new Map<ServiceProcess, number>();
const flip = (instance: ServiceProcess) => freezesAndThaws.set(instance, (freezesAndThaws.get(instance) ?? 0) + 1);

type Answer = { status: number; body: { data?: { id: string } } | undefined; ms: number; toFrozen: boolean };
async function call(instance: ServiceProcess, query: string, params: unknown, key?: string): Promise<Answer> {
  const started = performance.now();
  const before = freezesAndThaws.get(instance) ?? 0;
  const frozenMeanwhile = () => before % 2 === 1 || (freezesAndThaws.get(instance) ?? 0) !== before;
  try {
    const response = await fetch(`${instance.url}/api`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}`, ...(key ? { 'idempotency-key': key } : {}) },
      body: JSON.stringify({ query, params }),
      signal: AbortSignal.timeout(30_000),
    });
    const body = (await response.json()) as Answer['body'];
    return { status: response.status, body, ms: performance.now() - started, toFrozen: frozenMeanwhile() };
  } catch {
    return { status: 0, body: undefined, ms: performance.now() - started, toFrozen: frozenMeanwhile() };
  }
}

const figures = {
  commands: 0,
  keyedCommands: 0,
  keyedRetries: 0,
  unanswered: 0,
  /** The longest time from a keyed command's first failed attempt to its answer. */
  longestKeyedRecoveryMs: 0,
  /** The longest a successful command took on an instance that was not frozen (its waits are bounded by PROJECTION_WAIT_MS). */
  longestCommandMs: 0,
  frozenLeaderReplacedMs: [] as number[],
  kills: 0,
  terminations: 0,
  freezes: 0,
  databaseCuts: 0,
  receiverOutages: 0,
  eventStoreOutages: 0,
};

/** When each fault that may cut an attempt between its sending and its recording began (performance.now()). */
const cuts: { kind: 'crash' | 'freeze' | 'connections lost' | 'receiver down'; at: number }[] = [];

let stopping = false;
const pick = <T>(items: T[]) => items[Math.floor(random() * items.length)]!;
const live = () => instances.filter((instance) => instance.child.exitCode === null && instance.child.signalCode === null);

/** A keyed command is repeated with its key, on any instance, until it gets an answer that is not a failure or 409. */
async function keyedCommand(query: string, params: unknown): Promise<Answer> {
  const key = `soak-${figures.keyedCommands++}-${Math.floor(random() * 1e9)}`;
  let firstFailure: number | undefined;
  for (let attempt = 0; ; attempt++) {
    const answer = await call(pick(live()), query, params, key);
    if (answer.status !== 0 && answer.status !== 409 && answer.status < 500) {
      if (firstFailure !== undefined)
        figures.longestKeyedRecoveryMs = Math.max(figures.longestKeyedRecoveryMs, performance.now() - firstFailure);
      return answer;
    }
    firstFailure ??= performance.now();
    figures.keyedRetries += 1;
    if (performance.now() - firstFailure > 60_000) {
      figures.unanswered += 1;
      return answer;
    }
    await sleep(100);
  }
}

async function client(): Promise<void> {
  const mine: string[] = [];
  while (!stopping) {
    const roll = random();
    const keyed = random() < 1 / 3;
    const [query, params] =
      mine.length === 0 || roll < 0.4
        ? ['create_workspace', { organization_id: org, name: `soak ${Math.floor(random() * 1e6)}` }]
        : roll < 0.85
          ? [
              'update_workspace',
              { id: pick(mine), name: `renamed ${Math.floor(random() * 1e6)}`, attributes: { n: Math.floor(random() * 100) } },
            ]
          : ['delete_workspace', { id: mine.splice(Math.floor(random() * mine.length), 1)[0]! }];
    figures.commands += 1;
    const answer = keyed ? await keyedCommand(query, params) : await call(pick(live()), query, params);
    if (answer.status === 200) {
      if (!answer.toFrozen) figures.longestCommandMs = Math.max(figures.longestCommandMs, answer.ms);
      if (query === 'create_workspace' && answer.body?.data) mine.push(answer.body.data.id);
    }
  }
}

async function leaderInstance(): Promise<{ instance: ServiceProcess; pid: number } | undefined> {
  const { rows } = await database.query<{ pid: number; application_name: string }>(
    `SELECT l.pid, a.application_name FROM projector_leader l JOIN pg_stat_activity a ON a.pid = l.pid AND a.backend_start = l.backend_start`,
  );
  const row = rows[0];
  // Every connection names the process that holds it (src/infra/postgres.ts, application_name).
  const instance = row && live().find((candidate) => row.application_name.endsWith(` pid ${candidate.pid}`));
  return instance && { instance, pid: row.pid };
}

async function faults(): Promise<void> {
  const kinds = ['kill', 'freeze', 'terminate', 'database', 'receiver', ...(standIn ? (['event store'] as const) : [])] as const;
  const outageMs = 5000;
  for (let round = 0; !stopping; round++) {
    await sleep(6000);
    if (stopping) return;
    const kind = kinds[round % kinds.length]!;
    if (kind === 'kill') {
      const victim = live()[0] && pick(live());
      if (!victim)
        throw new Error(`no instance is running; their output:\n${instances.map((instance) => instance.output().slice(-3000)).join('\n')}`);
      cuts.push({ kind: 'crash', at: performance.now() });
      await victim.signal('SIGKILL');
      figures.kills += 1;
      instances.splice(instances.indexOf(victim), 1);
      instances.push(await startInstance());
    } else if (kind === 'freeze') {
      const leader = await leaderInstance();
      if (!leader) continue;
      flip(leader.instance);
      // Its attempts out time out as it resumes, before it reads the answers that came meanwhile: those are sent again.
      cuts.push({ kind: 'freeze', at: performance.now() });
      await leader.instance.signal('SIGSTOP');
      figures.freezes += 1;
      const frozenAt = performance.now();
      while (performance.now() - frozenAt < 10_000) {
        const current = (await database.query<{ pid: number }>('SELECT pid FROM projector_leader')).rows[0]?.pid;
        if (current !== undefined && current !== leader.pid) {
          figures.frozenLeaderReplacedMs.push(performance.now() - frozenAt);
          break;
        }
        await sleep(50);
      }
      await sleep(Math.max(0, 10_000 - (performance.now() - frozenAt)));
      await leader.instance.signal('SIGCONT');
      flip(leader.instance);
    } else if (kind === 'terminate') {
      cuts.push({ kind: 'connections lost', at: performance.now() });
      await database.query(
        'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
      );
      figures.terminations += 1;
    } else if (kind === 'database') {
      cuts.push({ kind: 'connections lost', at: performance.now() });
      await proxy.cut();
      figures.databaseCuts += 1;
      await sleep(outageMs);
      await proxy.open();
    } else if (kind === 'receiver') {
      // A delivery the receiver noted just before it went down may have lost its answer with the connection: the service then sends it again.
      cuts.push({ kind: 'receiver down', at: performance.now() });
      figures.receiverOutages += 1;
      await receiver.down(outageMs);
    } else {
      figures.eventStoreOutages += 1;
      await standIn!.stop();
      await sleep(outageMs);
      await standIn!.restart();
    }
  }
}

let exitCode = 0;
try {
  for (const webhookPath of webhookPaths) {
    const created = await call(instances[0]!, 'create_webhook', { organization_id: org, url: `${receiver.url}${webhookPath}` });
    if (created.status !== 200) throw new Error(`create_webhook answered ${created.status}`);
  }
  const load = Array.from({ length: clients }, () => client());
  const breaking = faults();
  await sleep(seconds * 1000);
  stopping = true;
  await Promise.all([...load, breaking]);
  await sleep(projectionWaitMs);

  // The checks read the log and the read tables directly, as `projections:verify` does.
  const pool = createPool(databaseUrl, logger, 4);
  const listener = new PgListener(databaseUrl, logger);
  await listener.start();
  const store: EventStore = standIn ? new EventStoreDBEventStore(standIn.url, { logger }) : new PostgresEventStore(pool, listener);
  const commandIds = new Map<string, number>();
  /** Every change in the log, as its id: the soak writes only to `org`, whose webhooks were made before any change. */
  const changeIds: string[] = [];
  let events = 0;
  for (let after = startOfLog; ;) {
    const page = await store.readAll(after, 1000);
    if (page.length === 0) break;
    for (const event of page) {
      const commandId = (event.metadata as { command_id?: string }).command_id;
      if (commandId) commandIds.set(commandId, (commandIds.get(commandId) ?? 0) + 1);
      changeIds.push(encodeCursor(event.position));
    }
    events += page.length;
    after = page[page.length - 1]!.position;
  }
  const doubled = [...commandIds.values()].filter((count) => count > 1).length;
  const differences = compareReadModels(await expectedReadModel(store), await actualReadModel(pool));
  await store.close();
  await listener.close();
  await pool.end();
  const webhooks = await deliveriesSettled(changeIds);

  const replaced = figures.frozenLeaderReplacedMs;
  const rows: [string, string][] = [
    ['event store', onEventStoreDB ? 'EventStoreDB (stand-in)' : 'PostgreSQL'],
    ['duration', `${seconds} s, ${clients} clients, seed ${values.seed}`],
    ['commands (keyed)', `${figures.commands} (${figures.keyedCommands})`],
    ['events in the log', String(events)],
    ['faults', `${figures.kills} kill -9, ${figures.freezes} SIGSTOP of the leader (10 s), ${figures.terminations} connections terminated`],
    ['keyed retries', String(figures.keyedRetries)],
    ['keyed commands never answered', String(figures.unanswered)],
    ['events doubled by a keyed retry', String(doubled)],
    ['projections:verify differences', String(differences.length)],
    [
      'webhook faults',
      `${figures.databaseCuts} PostgreSQL unreachable (5 s), ${figures.receiverOutages} receiver down (5 s)` +
        (standIn ? `, ${figures.eventStoreOutages} event store stopped (5 s)` : ''),
    ],
    ...webhooks.rows,
    ['longest wait from a keyed failure to its answer', `${(figures.longestKeyedRecoveryMs / 1000).toFixed(2)} s`],
    ['frozen leader replaced after', replaced.length ? replaced.map((ms) => `${(ms / 1000).toFixed(2)} s`).join(', ') : 'no freeze'],
    [
      'longest command (instances not frozen)',
      `${(figures.longestCommandMs / 1000).toFixed(2)} s (PROJECTION_WAIT_MS ${projectionWaitMs / 1000} s)`,
    ],
  ];
  const width = Math.max(...rows.map(([name]) => name.length));
  for (const [name, value] of rows) process.stdout.write(`${name.padEnd(width)}  ${value}\n`);
  for (const difference of differences.slice(0, 10)) process.stdout.write(`  difference: ${difference}\n`);
  if (doubled > 0 || differences.length > 0 || figures.unanswered > 0 || webhooks.failed) exitCode = 1;
} finally {
  await Promise.all(instances.map((instance) => instance.signal('SIGCONT').then(() => instance.signal('SIGKILL'))));
  await database.end();
  await receiver.close();
  await proxy.cut();
  await standIn?.stop();
  await embedded?.stop();
  rmSync(dataDir, { recursive: true, force: true });
}
process.exit(exitCode);

/**
 * Waits (up to 3 minutes: a lease left by a killed instance runs out after the attempt's timeout
 * and 30 s, and a failed attempt waits out its retry) until each webhook has received every
 * change; then counts, per webhook, what never came and what came more than once. A repeat is
 * put down to the last crash or lost connection that began before it (and at most one attempt's
 * timeout before the delivery it repeats): anything else is a repeat the contract does not allow.
 */
async function deliveriesSettled(changeIds: string[]): Promise<{ rows: [string, string][]; failed: boolean }> {
  const receivedBy = (webhookPath: string) => {
    const times = new Map<string, number[]>();
    for (const delivery of receiver.received) {
      if (delivery.path === webhookPath) times.set(delivery.webhookId, [...(times.get(delivery.webhookId) ?? []), delivery.at]);
    }
    return times;
  };
  const complete = () => webhookPaths.every((webhookPath) => changeIds.every((id) => receivedBy(webhookPath).has(id)));
  for (const until = performance.now() + 180_000; !complete() && performance.now() < until;) await sleep(500);
  const rows: [string, string][] = [['changes to deliver to each webhook', String(changeIds.length)]];
  let failed = false;
  for (const webhookPath of webhookPaths) {
    const times = receivedBy(webhookPath);
    const lost = changeIds.filter((id) => !times.has(id)).length;
    const repeats = { crash: 0, freeze: 0, 'connections lost': 0, 'receiver down': 0, unexplained: 0 };
    for (const at of times.values()) {
      for (let i = 1; i < at.length; i++) {
        const cause = cuts.findLast((cut) => cut.at >= at[i - 1]! - webhookTimeoutMs && cut.at <= at[i]!);
        repeats[cause?.kind ?? 'unexplained'] += 1;
      }
    }
    const deliveries = [...times.values()].reduce((sum, at) => sum + at.length, 0);
    rows.push([
      `webhook ${webhookPath}`,
      `${deliveries} deliveries of ${times.size} changes, ${lost} lost; repeated (same webhook-id): ${repeats.crash} after a kill -9, ${repeats.freeze} after a freeze, ` +
        `${repeats['connections lost']} after lost database connections, ${repeats['receiver down']} after the receiver went down, ` +
        `${repeats.unexplained} with none of these`,
    ]);
    if (lost > 0 || repeats.unexplained > 0) failed = true;
  }
  return { rows, failed };
}
