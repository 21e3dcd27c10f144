import { connect, type Socket } from 'node:net';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { mintToken } from '../../src/api/tokens.js';
import { createTestDatabase } from '../support/database.js';
import { eventStoreUrlFor, onEventStoreDB, prepareReadDatabase } from '../support/event-store.js';
import { startServiceProcess, type ServiceProcess } from '../support/service-process.js';
import { testSecret } from '../support/secret.js';
import { clientFor, jsonHeaders, sleep } from './helpers.js';

/**
 * Contract §14, the stream's life with a real service process: an idle stream gets a comment at
 * least every `CHANGE_STREAM_HEARTBEAT_MS`, and SIGTERM ends every open stream cleanly (the client
 * reads its end) without holding the process's exit; a client that stops reading holds neither the
 * stop nor its stream past its token.
 */
describe('change stream life', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  });

  /** A service process, killed by the cleanups of `cleanUp` (those after each test, unless told). */
  async function startService(
    env: Record<string, string> = {},
    cleanUp: (() => Promise<unknown>)[] = cleanups,
  ): Promise<ServiceProcess & { databaseUrl: string }> {
    const databaseUrl = await prepareReadDatabase(await createTestDatabase());
    const service = await startServiceProcess({ databaseUrl, eventStoreUrl: await eventStoreUrlFor(databaseUrl), env });
    cleanUp.push(() => service.signal('SIGKILL'));
    return { ...service, databaseUrl };
  }

  const openStream = async (service: ServiceProcess) => {
    const token = await service.token(['org_stream_life']);
    const response = await fetch(`${service.url}/api`, {
      method: 'POST',
      headers: { ...jsonHeaders(token), accept: 'text/event-stream' },
      body: JSON.stringify({ query: 'list_changes', params: { organization_id: 'org_stream_life' } }),
    });
    expect(response.status).toBe(200);
    return response.body!.getReader();
  };

  /** The stream's blocks (text between blank lines) until `enough` says stop or the stream ends; `ended` tells which. */
  async function readBlocks(
    reader: ReadableStreamDefaultReader<Uint8Array>,
    enough: (blocks: string[]) => boolean,
  ): Promise<{ blocks: string[]; ended: boolean }> {
    const decoder = new TextDecoder();
    const blocks: string[] = [];
    let text = '';
    while (!enough(blocks)) {
      const { value, done } = await reader.read();
      if (done) return { blocks, ended: true };
      text += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = text.indexOf('\n\n')) >= 0) {
        blocks.push(text.slice(0, end));
        text = text.slice(end + 2);
      }
    }
    return { blocks, ended: false };
  }

  it('sends a comment every heartbeat while no change comes', async () => {
    const service = await startService({ CHANGE_STREAM_HEARTBEAT_MS: '200' });
    const reader = await openStream(service);
    cleanups.push(() => reader.cancel());
    // Three heartbeats take 0.6 s; without them the stream stays silent and the bound below ends the wait.
    const silence = new Promise<'silent'>((resolve) => setTimeout(() => resolve('silent'), 8_000).unref());
    const read = readBlocks(reader, (blocks) => blocks.filter((block) => block === ': keep-alive').length >= 3);
    const outcome = await Promise.race([read, silence]);
    expect(outcome).not.toBe('silent');
    const { blocks, ended } = outcome as Awaited<typeof read>;
    expect(ended).toBe(false);
    // Comments only: nothing changed, so no event was sent.
    expect(blocks.every((block) => block.startsWith(':'))).toBe(true);
  });

  // A quarter of a minute of waiting, once: the comments are the HTTP layer's timer, whichever store holds the events.
  describe.runIf(!onEventStoreDB)('the heartbeat at its largest, run once, in the PostgreSQL run', () => {
    it('sends the comments within the heartbeat setting, also at its largest, 15 s (the contract: at least every 15 s)', async () => {
      const service = await startService({ CHANGE_STREAM_HEARTBEAT_MS: '15000' });
      const reader = await openStream(service);
      cleanups.push(() => reader.cancel());
      // When each comment arrived: the opening one, then a keep-alive (that they go on coming, the
      // test above shows with a short setting).
      const arrivals: number[] = [];
      const { blocks } = await readBlocks(reader, (read) => {
        while (arrivals.length < read.length) arrivals.push(performance.now());
        return read.length >= 2;
      });
      expect(blocks).toEqual([': change stream', ': keep-alive']);
      const gap = arrivals[1]! - arrivals[0]!;
      expect(gap).toBeLessThan(15_000);
      // Not much sooner than the setting either: the stream waits only a little less, for its read and write.
      expect(gap).toBeGreaterThan(10_000);
    });
  });

  it('answers the usual JSON error, not an empty stream, when the first read fails, and frees the stream slot', async () => {
    // One stream per caller: a slot kept by a refused stream would turn the next one into a 429.
    const service = await startService({ CHANGE_STREAMS_PER_CALLER: '1' });
    const token = await service.token(['org_stream_life']);
    const request = () =>
      fetch(`${service.url}/api`, {
        method: 'POST',
        headers: { ...jsonHeaders(token), accept: 'text/event-stream' },
        body: JSON.stringify({ query: 'list_changes', params: { organization_id: 'org_stream_life' } }),
      });
    // The read database refuses sessions: no new one is allowed, and the service's are ended.
    const database = new URL(service.databaseUrl).pathname.slice(1);
    const admin = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
    await admin.connect();
    cleanups.push(() => admin.end());
    const allowConnections = async (allowed: boolean) => {
      await admin.query(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS ${allowed}`);
      if (!allowed) await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [database]);
    };
    await allowConnections(false);
    cleanups.push(() => allowConnections(true));
    for (let attempt = 0; attempt < 2; attempt++) {
      const refused = await request();
      expect(refused.status, service.output()).toBe(503);
      expect(refused.headers.get('content-type')).toMatch(/^application\/json/);
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('unavailable');
    }
    const metrics = await (await fetch(`${service.url}/metrics`)).text();
    expect(metrics).toMatch(/^wsapi_change_streams_open 0$/m);
    // Once the database answers again, the caller's one stream opens: the refused ones kept no slot.
    await allowConnections(true);
    const response = await request();
    expect(response.status, service.output()).toBe(200);
    const reader = response.body!.getReader();
    cleanups.push(() => reader.cancel());
    expect((await readBlocks(reader, (blocks) => blocks.length > 0)).blocks[0]).toBe(': change stream');
  });

  it('ends an open stream cleanly on SIGTERM, and the process exits without waiting for it', async () => {
    const service = await startService();
    const reader = await openStream(service);
    cleanups.push(() => reader.cancel());
    // The stream is open once its first comment has come.
    expect((await readBlocks(reader, (blocks) => blocks.length > 0)).blocks[0]).toBe(': change stream');
    const reading = readBlocks(reader, () => false);
    await service.signal('SIGTERM');
    // A clean end (the reader's `done`), not a reset connection (which rejects the read).
    expect(await reading).toEqual({ blocks: [], ended: true });
    // Exit code 0: the shutdown finished; had the stream held it, the 15 s guard would have exited with 1.
    expect(service.child.exitCode, service.output()).toBe(0);
  });

  /** Changes of about 12 MB in `organization`: more than the socket buffers between a stream and a client that does not read hold. */
  async function fillFeed(service: ServiceProcess, organization: string): Promise<void> {
    const client = clientFor(service, await service.token([organization]));
    const workspace = await client.createWorkspace({ organization_id: organization, name: 'Large' });
    const documentation = { blocks: [{ type: 'text' as const, content: 'x'.repeat(500_000) }] };
    for (let i = 0; i < 24; i++) await client.createSolution({ workspace_id: workspace.id, name: `Large ${i}`, documentation });
  }

  /** A stream requested on a raw connection that then never reads: its answer stops in the socket buffers. */
  async function pausedStream(service: ServiceProcess, token: string, organization: string): Promise<Socket> {
    const { hostname, port } = new URL(service.url);
    const socket = connect({ port: Number(port), host: hostname });
    cleanups.push(async () => socket.destroy());
    socket.on('error', () => undefined);
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    socket.pause();
    const body = JSON.stringify({ query: 'list_changes', params: { organization_id: organization } });
    socket.write(
      `POST /api HTTP/1.1\r\nHost: localhost\r\nauthorization: Bearer ${token}\r\naccept: text/event-stream\r\n` +
        `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    return socket;
  }

  /** The service's count of open change streams (GET /metrics). */
  const openStreams = async (service: ServiceProcess) =>
    Number(/^wsapi_change_streams_open (\d+)$/m.exec(await (await fetch(`${service.url}/metrics`)).text())?.[1]);

  /** Waits, polling, until `condition` holds; false when `ms` passed first. */
  async function within(ms: number, condition: () => Promise<boolean>): Promise<boolean> {
    for (const end = Date.now() + ms; Date.now() < end; await sleep(100)) if (await condition()) return true;
    return condition();
  }

  // One service and one feed of 12 MB for both (filling it is most of their time); the second stops the service.
  describe('with a client that does not read', () => {
    const afterBoth: (() => Promise<unknown>)[] = [];
    let service: ServiceProcess;
    beforeAll(async () => {
      // A drain time far longer than the bound below: a stream left waiting for its client would hold the stop that long.
      service = await startService({ SHUTDOWN_DRAIN_MS: '120000' }, afterBoth);
      await fillFeed(service, 'org_stream_unread');
    });
    afterAll(async () => {
      for (const cleanup of afterBoth.splice(0)) await cleanup().catch(() => undefined);
    });

    it('ends the stream once its token is no longer accepted', async () => {
      // Expired 25 s ago: accepted for about 5 s more.
      const lateToken = await mintToken(testSecret, { subject: 'late', organizations: ['org_stream_unread'], expiresIn: '-25s' });
      await pausedStream(service, lateToken, 'org_stream_unread');
      expect(await within(20_000, async () => (await openStreams(service)) === 1)).toBe(true);
      // The token's time is up within 5 s; the stream is closed then, although its client still reads nothing.
      expect(await within(30_000, async () => (await openStreams(service)) === 0), service.output()).toBe(true);
    });

    it('stops the service promptly on SIGTERM, instead of waiting out the drain time', async () => {
      // The test before it leaves no stream open (else the count below would be another's).
      expect(await within(20_000, async () => (await openStreams(service)) === 0)).toBe(true);
      await pausedStream(service, await service.token(['org_stream_unread']), 'org_stream_unread');
      expect(await within(20_000, async () => (await openStreams(service)) === 1)).toBe(true);
      // Its first page (12 MB, read in a fraction of a second) is written by now, and waits on the client.
      await sleep(2_000);
      const stopped = service.signal('SIGTERM').then(() => 'stopped' as const);
      const outcome = await Promise.race([stopped, sleep(30_000).then(() => 'still running' as const)]);
      expect(outcome, service.output()).toBe('stopped');
      expect(service.child.exitCode, service.output()).toBe(0);
      expect(service.output()).not.toContain('requests still unfinished after the drain time');
    });
  });

  it('answers a long poll on SIGTERM with what it has, rather than holding it until the drain time cuts its connection', async () => {
    // A drain time shorter than the poll's wait: a poll left waiting would hold the stop that long, then lose its answer.
    const service = await startService({ SHUTDOWN_DRAIN_MS: '5000' });
    const token = await service.token(['org_stream_life']);
    const polling = fetch(`${service.url}/api`, {
      method: 'POST',
      headers: jsonHeaders(token),
      body: JSON.stringify({ query: 'list_changes', params: { organization_id: 'org_stream_life', wait_ms: 30_000 } }),
    });
    // The poll is waiting once the service has read it; a second's grace is ample for that.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const stopping = service.signal('SIGTERM');
    const answer = await polling;
    expect(answer.status).toBe(200);
    expect(answer.headers.get('connection')).toBe('close');
    const { data } = (await answer.json()) as { data: { items: unknown[]; next: string; has_more: boolean } };
    expect(data).toMatchObject({ items: [], has_more: false });
    expect(data.next).toMatch(/^[A-Za-z0-9_-]{1,128}$/);
    await stopping;
    expect(service.child.exitCode, service.output()).toBe(0);
  });
});
