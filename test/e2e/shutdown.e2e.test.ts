import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/database.js';
import { eventStoreUrlFor, prepareReadDatabase } from '../support/event-store.js';
import { startOfLog } from '../../src/eventstore/port.js';
import { startServiceProcess, type ServiceProcess } from '../support/service-process.js';
import { eventually, startStack, type Stack } from '../support/stack.js';

/**
 * SIGTERM with connections that will never finish a request on their own: one that sent nothing,
 * one that sent half its headers, one whose body stops short of its Content-Length. None may hold
 * the stop: a client (or an attacker) must not be able to turn a clean stop into the forced one.
 */
describe('shutdown with stalled connections', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  });

  /** The service as its own process, and its stores as a tool opens them (to see what it stored). */
  async function startService(env: Record<string, string>): Promise<{ service: ServiceProcess; stack: Stack }> {
    const databaseUrl = await prepareReadDatabase(await createTestDatabase());
    const stack = await startStack(databaseUrl);
    cleanups.push(() => stack.close());
    const service = await startServiceProcess({ databaseUrl, eventStoreUrl: await eventStoreUrlFor(databaseUrl), env });
    cleanups.push(() => service.signal('SIGKILL'));
    return { service, stack };
  }

  /** A `POST /api` as it goes on the wire. */
  function rawPost(token: string, query: string, params: object): string {
    const body = JSON.stringify({ query, params });
    return (
      `POST /api HTTP/1.1\r\nHost: localhost\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
    );
  }

  /** A raw connection that writes `text` and then stalls; `closed` settles with what the server sent before closing it, and when. */
  async function stalledConnection(
    service: ServiceProcess,
    text: string,
  ): Promise<{ closed: Promise<{ received: string; at: number }>; send: (more: string) => void; received: () => string }> {
    const { hostname, port } = new URL(service.url);
    // Half-open allowed: like a client that never closes its side, it keeps the connection until the server ends it.
    const socket: Socket = connect({ port: Number(port), host: hostname, allowHalfOpen: true });
    cleanups.push(async () => socket.destroy());
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    if (text) socket.write(text);
    let received = '';
    socket.on('data', (chunk: Buffer) => (received += chunk.toString()));
    // A reset is as good an end as a close here: the point is that the server let go.
    socket.on('error', () => undefined);
    // Closed as far as the client can tell: the server's end of the stream (or the socket's close, on a reset).
    const closed = new Promise<{ received: string; at: number }>((resolve) => {
      const settle = () => resolve({ received, at: Date.now() });
      socket.once('end', settle).once('close', settle);
    });
    return { closed, send: (more) => socket.write(more), received: () => received };
  }

  it('stops cleanly: idle and half-sent connections are closed after the idle grace, a stalled body when the drain time is up', async () => {
    const { service } = await startService({ SHUTDOWN_DRAIN_MS: '2000' });
    const silent = await stalledConnection(service, '');
    const halfHeaders = await stalledConnection(service, 'POST /api HTTP/1.1\r\nHost: localhost\r\n');
    // With a token, so that the request waits for its body rather than being refused on its headers.
    const token = await service.token(['org_shutdown']);
    const shortBody = await stalledConnection(
      service,
      `POST /api HTTP/1.1\r\nHost: localhost\r\nauthorization: Bearer ${token}\r\n` +
        'content-type: application/json\r\ncontent-length: 100\r\n\r\n{"query":',
    );
    // The server has the stalled request's headers before the signal comes.
    await new Promise((resolve) => setTimeout(resolve, 200));

    const signalledAt = Date.now();
    await service.signal('SIGTERM');

    // Exit code 0: the shutdown finished; had a connection held it, the guard would have exited with 1.
    expect(service.child.exitCode, service.output()).toBe(0);
    for (const connection of [silent, halfHeaders, shortBody]) expect((await connection.closed).received).toBe('');
    const drainEnd = service
      .output()
      .split('\n')
      .find((line) => line.includes('requests still unfinished after the drain time'));
    expect(drainEnd, service.output()).toBeDefined();
    const drainEndedAt = Date.parse((JSON.parse(drainEnd!) as { time: string }).time);
    // The connections that had no request in flight were closed when the idle grace (1 s) was up, not when the drain time was.
    expect((await silent.closed).at - signalledAt).toBeGreaterThanOrEqual(900);
    expect((await silent.closed).at).toBeLessThan(drainEndedAt);
    expect((await halfHeaders.closed).at).toBeLessThan(drainEndedAt);
    expect((await shortBody.closed).at).toBeGreaterThanOrEqual(drainEndedAt);
  });

  it('stops cleanly with a change stream open whose client never closes its side', async () => {
    // No request is unfinished once the stream has ended, so only the stream's own end may close its
    // connection; the guard then exits 1 after 25 s, before Node's keep-alive timeout would.
    const { service } = await startService({ SHUTDOWN_DRAIN_MS: '20000' });
    const token = await service.token(['org_shutdown']);
    const body = JSON.stringify({ query: 'list_changes', params: { organization_id: 'org_shutdown' } });
    const stream = await stalledConnection(
      service,
      `POST /api HTTP/1.1\r\nHost: localhost\r\nauthorization: Bearer ${token}\r\naccept: text/event-stream\r\n` +
        `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    // And a connection with nothing in flight, kept for the idle grace: the grace must not hold up the stream's end.
    const idle = await stalledConnection(service, '');
    await new Promise((resolve) => setTimeout(resolve, 200));

    // Its answer began keep-alive, before the stop; were the connection only half-closed, Node would
    // keep it until its keep-alive timeout (72 s), and the stop's guard would exit 1.
    const stopping = service.signal('SIGTERM');
    const { received: streamed, at: streamEndedAt } = await stream.closed;
    await stopping;

    expect(service.child.exitCode, service.output()).toBe(0);
    // Answered, and ended cleanly (the last chunk) before the server closed the connection.
    expect(streamed).toMatch(/^HTTP\/1\.1 200 /);
    expect(streamed.endsWith('0\r\n\r\n')).toBe(true);
    // Ended when the stop began, not when the idle connection's grace was up.
    expect(streamEndedAt).toBeLessThan((await idle.closed).at);
  });

  it('answers a request sent on an idle keep-alive connection after the stop began: 503 with connection: close, not a reset', async () => {
    const { service, stack } = await startService({ LOG_LEVEL: 'info' });
    const token = await service.token(['org_shutdown']);
    // Answered before the stop and kept alive: idle when the stop begins, as a busy client's connection is between two requests.
    const connection = await stalledConnection(service, rawPost(token, 'list_workspaces', { page: 1, size: 20 }));
    await eventually(() => /^HTTP\/1\.1 200 /.test(connection.received()), 5000);
    const stopping = service.signal('SIGTERM');
    await eventually(() => service.output().includes('shutting down'), 5000);
    await new Promise((resolve) => setTimeout(resolve, 100));
    // Sent before its client could know of the stop.
    connection.send(rawPost(token, 'create_workspace', { organization_id: 'org_shutdown', name: 'sent during the stop' }));
    const { received } = await connection.closed;
    await stopping;

    expect(service.child.exitCode, service.output()).toBe(0);
    const answers = received.split(/(?=HTTP\/1\.1 \d{3} )/);
    expect(answers, received).toHaveLength(2);
    expect(answers[1]).toMatch(/^HTTP\/1\.1 503 /);
    expect(answers[1]).toMatch(/\r\nconnection: close\r\n/i);
    // A planned refusal, not a failure in the log.
    expect(service.output()).not.toContain('request failed');
    // Refused, so not done.
    expect(await stack.store.readAll(startOfLog, 100)).toEqual([]);
  });

  it('answers the request in flight with connection: close, and takes no request sent on its connection after the stop began', async () => {
    const { service, stack } = await startService({ LOG_LEVEL: 'info' });
    const token = await service.token(['org_shutdown']);
    const post = (query: string, params: object) => rawPost(token, query, params);
    // A long poll: in flight when the stop comes, answered when its time is up.
    const connection = await stalledConnection(service, post('list_changes', { organization_id: 'org_shutdown', wait_ms: 1500 }));
    await new Promise((resolve) => setTimeout(resolve, 200));
    const stopping = service.signal('SIGTERM');
    await eventually(() => service.output().includes('shutting down'), 5000);
    await new Promise((resolve) => setTimeout(resolve, 100));
    connection.send(post('create_workspace', { organization_id: 'org_shutdown', name: 'sent during the stop' }));
    const { received } = await connection.closed;
    await stopping;

    expect(service.child.exitCode, service.output()).toBe(0);
    // One answer, the long poll's, saying that the connection ends: the client knows the next request was not taken.
    expect(received.match(/^HTTP\/1\.1 /gm), received).toHaveLength(1);
    expect(received).toMatch(/^HTTP\/1\.1 200 /);
    expect(received).toMatch(/\r\nconnection: close\r\n/i);
    // And it was not: nothing was stored for it.
    expect(await stack.store.readAll(startOfLog, 100)).toEqual([]);
  });

  it('when a step holds the stop past its limit, exits 1 and names the step', async () => {
    const { service, stack } = await startService({ SHUTDOWN_DRAIN_MS: '500', PROJECTION_WAIT_MS: '1000', LOG_LEVEL: 'info' });
    const token = await service.token(['org_held']);
    // Another session holds the workspaces table: the projector's next batch waits for it.
    const holder = new pg.Client({ connectionString: stack.url });
    await holder.connect();
    cleanups.push(() => holder.end());
    await holder.query('BEGIN');
    await holder.query('LOCK TABLE workspaces IN ACCESS EXCLUSIVE MODE');
    const created = await fetch(`${service.url}/api`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ query: 'create_workspace', params: { organization_id: 'org_held', name: 'held' } }),
    });
    // Its events stored, the command answers once its wait is up (contract §11).
    expect(created.status).toBe(200);
    expect(created.headers.get('x-projection-behind')).toBe('true');

    await service.signal('SIGTERM');
    expect(service.child.exitCode, service.output()).toBe(1);
    expect(service.output()).toMatch(/"step":"stopping the projector \(its batch in progress\)".*"msg":"shutdown took too long/);
  });

  it('exits after its stop while an EventStoreDB node takes connections and never answers, rather than staying alive', async () => {
    // The client's connection to such a node outlives its dispose(): the stop must not wait on it.
    const taken = new Set<Socket>();
    const silentNode = createServer((socket) => taken.add(socket));
    await new Promise<void>((resolve) => silentNode.listen(0, '127.0.0.1', resolve));
    cleanups.push(async () => {
      for (const socket of taken) socket.destroy();
      await new Promise((resolve) => silentNode.close(resolve));
    });
    const databaseUrl = await prepareReadDatabase(await createTestDatabase());
    const { port } = silentNode.address() as AddressInfo;
    const service = await startServiceProcess({
      databaseUrl,
      eventStoreUrl: `esdb://127.0.0.1:${port}?tls=false`,
      env: { SHUTDOWN_DRAIN_MS: '1000', LOG_LEVEL: 'info' },
    });
    cleanups.push(() => service.signal('SIGKILL'));
    const token = await service.token(['org_silent']);
    // A command and a readiness probe, both waiting on the node when the stop begins.
    void fetch(`${service.url}/api`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ query: 'create_workspace', params: { organization_id: 'org_silent', name: 'never stored' } }),
    }).catch(() => undefined);
    void fetch(`${service.url}/readyz`).catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, 500));

    const exited = service.signal('SIGINT').then(() => 'exited');
    // Far beyond the stop's own limit (the drain time and 5 s): only a process that stays alive gets here.
    const stillAlive = new Promise((resolve) => setTimeout(() => resolve('still alive'), 30_000).unref());
    expect(await Promise.race([exited, stillAlive]), service.output()).toBe('exited');
    expect(service.output()).toMatch(/"msg":"stopped"/);
    expect(service.child.exitCode, service.output()).toBe(0);
  });
});
