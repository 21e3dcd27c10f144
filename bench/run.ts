/**
 * npm run bench [-- --workspaces 100000 --samples 200 --tracing]
 *
 * Starts the service on a fresh embedded PostgreSQL (or DATABASE_URL), appends workspaces through
 * the event store port, lets the projector build the read tables, then measures side by side:
 * appends per second, projection lag from commit to visible, and get_workspace / list_workspaces
 * latency at page 1 and page 1,000 (size 100) over HTTP, interleaved so noise hits all alike.
 * With --tracing, every request is traced and exported by OTLP/HTTP, as OTEL_EXPORTER_OTLP_ENDPOINT
 * would have it, to a local sink that accepts and discards the spans: the cost of tracing is the
 * difference from a run without it.
 */
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { mintToken } from '../src/api/tokens.js';
import { parseConfig } from '../src/config.js';
import { workspaceStream } from '../src/eventstore/stream-names.js';
import { createClock } from '../src/infra/clock.js';
import { startConfiguredTracing } from '../src/observability/tracing.js';
import { buildServiceApp, startRuntime } from '../src/runtime/service.js';
import { decideWorkspace, initialWorkspaceState } from '../src/domain/workspace.js';
import { percentile } from './statistics.js';

const { values } = parseArgs({
  options: {
    workspaces: { type: 'string', default: '100000' },
    samples: { type: 'string', default: '200' },
    writers: { type: 'string', default: '32' },
    tracing: { type: 'boolean', default: false },
  },
});
const workspaceCount = Number(values.workspaces);
const samples = Number(values.samples);
const writers = Number(values.writers);
const organization = 'org_bench';
const secret = 'bench-secret-bench-secret-bench-secret!!';

const dataDir = mkdtempSync(path.join(tmpdir(), 'wsapi-bench-'));
const config = parseConfig({
  ...process.env,
  DATA_DIR: dataDir,
  AUTH_JWT_SECRET: secret,
  LOG_LEVEL: 'silent',
  PROJECTION_WAIT_MS: '60000',
});
const logger = pino({ level: 'silent' });

/** Takes OTLP/HTTP exports and counts them, as a collector would take them. */
const spanSink = { requests: 0, bytes: 0 };
const sink = createServer((request, response) => {
  spanSink.requests += 1;
  request.on('data', (chunk: Buffer) => (spanSink.bytes += chunk.length));
  request.on('end', () => response.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
});
if (values.tracing) await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve));
const tracing = values.tracing
  ? await startConfiguredTracing({
      tracesUrl: `http://127.0.0.1:${(sink.address() as AddressInfo).port}/v1/traces`,
      serviceName: 'wsapi-bench',
    })
  : undefined;
const runtime = await startRuntime(config, logger);
const clock = createClock();

const summary = (millis: number[]) => ({ p50: percentile(millis, 50), p95: percentile(millis, 95), p99: percentile(millis, 99) });
const fmt = (n: number) => n.toFixed(2);

try {
  // 1. Appends per second: `writers` concurrent appenders, one new stream per append.
  const ids: string[] = [];
  let next = 0;
  const appendStart = performance.now();
  await Promise.all(
    Array.from({ length: writers }, async () => {
      while (next < workspaceCount) {
        next += 1;
        const id = `ws_bench${String(next).padStart(8, '0')}`;
        ids.push(id);
        const [event] = decideWorkspace(
          {
            type: 'CreateWorkspace',
            id,
            organizationId: organization,
            name: `Workspace ${next}`,
            attributes: { team: `t${next % 50}` },
            context: { actor: 'bench', requestId: randomUUID(), now: clock() },
          },
          initialWorkspaceState,
        );
        await runtime.store.append(workspaceStream(id), 0n, [
          { id: randomUUID(), type: event!.type, data: event!.data, metadata: event!.metadata },
        ]);
      }
    }),
  );
  const appendSeconds = (performance.now() - appendStart) / 1000;

  // 2. How far the live projector trailed the writers when they finished.
  const backlog = await runtime.store.readAll(runtime.progress.current, 1_000_000);
  const catchUpStart = performance.now();
  if (backlog.length > 0) await runtime.progress.waitFor(backlog[backlog.length - 1]!.position, 600_000);
  const catchUpMillis = performance.now() - catchUpStart;

  // 3. Projection lag, commit to visible, one append at a time on an idle projector.
  const lags: number[] = [];
  for (let i = 0; i < samples; i++) {
    const id = `ws_lag${i}`;
    const [event] = decideWorkspace(
      {
        type: 'CreateWorkspace',
        id,
        organizationId: 'org_lag',
        name: 'lag',
        context: { actor: 'bench', requestId: randomUUID(), now: clock() },
      },
      initialWorkspaceState,
    );
    const started = performance.now();
    const { position } = await runtime.store.append(workspaceStream(id), 0n, [
      { id: randomUUID(), type: event!.type, data: event!.data, metadata: event!.metadata },
    ]);
    const appended = performance.now();
    await runtime.progress.waitFor(position, 10_000);
    lags.push(performance.now() - appended);
    if (i === 0) lags.pop(); // the first one includes the projector waking from idle back-off
    void started;
  }

  // 4. HTTP latency, interleaved, in steady state: statistics and visibility map as autovacuum keeps them.
  await runtime.pool.query('VACUUM ANALYZE workspaces');
  const app = await buildServiceApp(config, runtime, logger, { rateLimitPerMinute: 0, serveMetrics: true });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/api`;
  const token = await mintToken(secret, { subject: 'bench', organizations: [organization], expiresIn: '1h' });
  const call = async (query: string, params: unknown) => {
    const started = performance.now();
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query, params }),
    });
    const body = (await response.json()) as { data?: { items?: unknown[] } };
    if (response.status !== 200) throw new Error(`${query} answered ${response.status}`);
    return { millis: performance.now() - started, body };
  };
  const timings = { get: [] as number[], page1: [] as number[], page1000: [] as number[] };
  const lastPage = Math.min(1000, Math.ceil(workspaceCount / 100));
  for (let i = 0; i < 20; i++) await call('list_workspaces', { page: 1, size: 100 }); // warm-up
  for (let i = 0; i < samples; i++) {
    timings.get.push((await call('get_workspace', { id: ids[Math.floor(Math.random() * ids.length)] })).millis);
    timings.page1.push((await call('list_workspaces', { page: 1, size: 100 })).millis);
    const deep = await call('list_workspaces', { page: lastPage, size: 100 });
    if ((deep.body.data?.items?.length ?? 0) === 0) throw new Error(`page ${lastPage} is empty`);
    timings.page1000.push(deep.millis);
  }
  await app.close();

  const get = summary(timings.get);
  const page1 = summary(timings.page1);
  const page1000 = summary(timings.page1000);
  const lag = summary(lags);
  await tracing?.shutdown();
  console.log(
    `records: ${workspaceCount} workspaces in one organization; ${samples} samples each; PostgreSQL ${config.databaseUrl ? 'DATABASE_URL' : 'embedded'}`,
  );
  console.log(
    values.tracing
      ? `tracing:         on, exported by OTLP/HTTP to a local sink (${spanSink.requests} exports, ${fmt(spanSink.bytes / 1024)} KiB)`
      : 'tracing:         off (no provider)',
  );
  console.log(`appends:         ${fmt(workspaceCount / appendSeconds)} appends/s (${writers} concurrent writers, 1 event each)`);
  console.log(`projection:      ${backlog.length} events behind when the writers finished; caught up ${fmt(catchUpMillis)} ms later`);
  console.log(`projection lag:  p50 ${fmt(lag.p50)} ms, p95 ${fmt(lag.p95)} ms, p99 ${fmt(lag.p99)} ms (commit to applied)`);
  console.log(`get_workspace:   p50 ${fmt(get.p50)} ms, p95 ${fmt(get.p95)} ms, p99 ${fmt(get.p99)} ms`);
  console.log(`list page 1:     p50 ${fmt(page1.p50)} ms, p95 ${fmt(page1.p95)} ms, p99 ${fmt(page1.p99)} ms (size 100)`);
  console.log(`list page ${lastPage}:  p50 ${fmt(page1000.p50)} ms, p95 ${fmt(page1000.p95)} ms, p99 ${fmt(page1000.p99)} ms (size 100)`);
  console.log(
    `ratio page ${lastPage} / page 1 (p50): ${fmt(page1000.p50 / page1.p50)}x; list page 1 / get (p50): ${fmt(page1.p50 / get.p50)}x`,
  );
} finally {
  await runtime.close();
  sink.close();
  rmSync(dataDir, { recursive: true, force: true });
}
