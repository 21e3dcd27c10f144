/**
 * The service's resident memory over a large store:
 *
 *   npm run bench:memory -- [--records 1000000] [--requests 10000]
 *
 * Seeds `--records` records straight into a fresh database (half workspaces over 100
 * organizations, half solutions in them; one creation event each), builds the read tables with
 * the rebuild, starts the service on it as `npm start` does, sends `--requests` mixed requests over
 * 32 connections (gets, lists, updates and creations across the whole store) and prints the
 * service's RSS and V8 heap from its /metrics. PostgreSQL: DATABASE_URL's server when set, else an
 * embedded one in a temporary directory.
 */
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { pino } from 'pino';
import { mintToken } from '../src/api/tokens.js';
import { parseConfig } from '../src/config.js';
import { currentSchemaVersion } from '../src/domain/events.js';
import { startEmbeddedPostgres } from '../src/infra/embedded-postgres.js';
import { databaseUrl as databaseUrlOn } from './databases.js';
import { rebuildReadModel } from '../src/projections/rebuild/index.js';
import { openStores } from '../src/runtime/stores.js';
import { scrape, total } from '../test/support/metrics.js';
import { testSecret } from '../test/support/secret.js';
import { startServiceProcess } from '../test/support/service-process.js';

const { values } = parseArgs({
  options: { records: { type: 'string', default: '1000000' }, requests: { type: 'string', default: '10000' } },
});
const records = Number(values.records);
const requests = Number(values.requests);
const workspaces = Math.ceil(records / 2);
const solutions = records - workspaces;
const organizations = Array.from({ length: 100 }, (_, index) => `org_${index}`);
const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
const out = (line: string) => process.stdout.write(`${line}\n`);
const logger = pino({ level: 'warn' });

/** One creation event per record, in the shape the service writes (src/domain/events.ts), in global order. */
async function seed(databaseUrl: string): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query('SET synchronous_commit = off');
    const occurredAt = (offset: string) =>
      `to_char(timestamp '2026-01-01' + (${offset}) * interval '1 millisecond', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
    const metadata = (offset: string) =>
      `jsonb_build_object('actor', 'seed', 'request_id', 'seed-' || (${offset}), 'occurred_at', ${occurredAt(offset)}, 'schema_version', ${currentSchemaVersion})`;
    await client.query(
      `INSERT INTO es_events (stream_name, version, event_id, type, data, metadata)
       SELECT 'workspace-ws_' || i, 1, gen_random_uuid(), 'WorkspaceCreated',
         jsonb_build_object('id', 'ws_' || i, 'organization_id', 'org_' || (i % 100), 'name', 'Workspace ' || i,
           'description', 'seeded', 'attributes', jsonb_build_object('team', 't' || (i % 50))),
         ${metadata('i')}
       FROM generate_series(1, $1::int) AS i`,
      [workspaces],
    );
    await client.query(
      `INSERT INTO es_events (stream_name, version, event_id, type, data, metadata)
       SELECT 'solution-sol_' || i, 1, gen_random_uuid(), 'SolutionCreated',
         jsonb_build_object('id', 'sol_' || i, 'organization_id', 'org_' || (w % 100), 'workspace_id', 'ws_' || w, 'name', 'Solution ' || i,
           'description', 'seeded', 'attributes', '{}'::jsonb, 'documentation', jsonb_build_object('blocks', '[]'::jsonb)),
         ${metadata('$1::int + i')}
       FROM generate_series(1, $2::int) AS i, LATERAL (SELECT 1 + i % $1::int AS w) AS parent`,
      [workspaces, solutions],
    );
    await client.query('INSERT INTO es_streams (stream_name, version) SELECT stream_name, 1 FROM es_events');
    await client.query('VACUUM (ANALYZE) es_events, es_streams');
  } finally {
    await client.end();
  }
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 32 });
function post(url: string, token: string, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      `${url}/api`,
      {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}`, 'content-length': Buffer.byteLength(body) },
      },
      (response) => {
        response.resume();
        response.on('end', () => resolve(response.statusCode ?? 0));
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}

/** The `index`th request of the mix, spread over the whole store. */
function mixed(index: number): string {
  const workspace = `ws_${1 + ((index * 7919) % workspaces)}`;
  const solution = `sol_${1 + ((index * 104_729) % solutions)}`;
  const page = 1 + (index % 50);
  switch (index % 10) {
    case 0:
    case 1:
    case 2:
      return JSON.stringify({ query: 'get_workspace', params: { id: workspace } });
    case 3:
    case 4:
      return JSON.stringify({ query: 'get_solution', params: { id: solution } });
    case 5:
      return JSON.stringify({ query: 'list_workspaces', params: { page, size: 20 } });
    case 6:
      return JSON.stringify({ query: 'list_solutions', params: { workspace_id: workspace, page: 1, size: 20 } });
    case 7:
    case 8:
      return JSON.stringify({ query: 'update_workspace', params: { id: workspace, name: `Workspace ${index} renamed` } });
    default:
      return JSON.stringify({ query: 'create_workspace', params: { organization_id: organizations[index % 100], name: `New ${index}` } });
  }
}

const dataDir = mkdtempSync(path.join(tmpdir(), 'wsapi-bench-memory-'));
const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres(dataDir, logger);
const adminUrl = process.env.DATABASE_URL ?? embedded!.url;
const databaseName = `bench_memory_${Date.now()}`;
const databaseUrl = databaseUrlOn(adminUrl, databaseName);
const admin = new pg.Client({ connectionString: adminUrl });
await admin.connect();
await admin.query(`CREATE DATABASE ${databaseName}`);
try {
  const started = performance.now();
  // Opening the stores as a tool does creates the schema; the rebuild then fills the read tables.
  const stores = await openStores(parseConfig({ DATABASE_URL: databaseUrl }, 'tool'), logger, { poolSize: 6, listen: false });
  try {
    await seed(databaseUrl);
    await rebuildReadModel({ connectionString: databaseUrl, store: stores.store, logger });
  } finally {
    await stores.close();
  }
  out(
    `seeded ${integer.format(workspaces)} workspaces and ${integer.format(solutions)} solutions and built the read tables in ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );

  const service = await startServiceProcess({ databaseUrl, env: { LOG_LEVEL: 'warn' } });
  try {
    const token = await mintToken(testSecret, { subject: 'bench', organizations, expiresIn: '2h' });
    const atStart = await scrape(`${service.url}/metrics`);
    let next = 0;
    const statuses = new Map<number, number>();
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        while (next < requests) {
          const status = await post(service.url, token, mixed(next++));
          statuses.set(status, (statuses.get(status) ?? 0) + 1);
        }
      }),
    );
    const atEnd = await scrape(`${service.url}/metrics`);
    const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MiB`;
    const memory = (figures: typeof atEnd) =>
      `RSS ${mib(total(figures, 'wsapi_process_resident_memory_bytes'))}, V8 heap ${mib(total(figures, 'wsapi_nodejs_heap_size_used_bytes'))} used of ${mib(total(figures, 'wsapi_nodejs_heap_size_total_bytes'))}`;
    out(`service at start: ${memory(atStart)}`);
    out(
      `service after ${integer.format(requests)} mixed requests (statuses ${[...statuses].map(([status, count]) => `${status}: ${count}`).join(', ')}): ${memory(atEnd)}`,
    );
  } finally {
    await service.signal('SIGTERM');
  }
} finally {
  agent.destroy();
  await admin.query(`DROP DATABASE IF EXISTS ${databaseName} WITH (FORCE)`);
  await admin.end();
  await embedded?.stop();
  rmSync(dataDir, { recursive: true, force: true });
}
