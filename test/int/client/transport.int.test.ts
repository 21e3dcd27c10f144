import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ApiError, createClient, ServiceUnreachable } from '../../../src/client/index.js';

/**
 * The typed client's transport against scripted HTTP servers on loopback: what a real network does
 * to it (an answer cut off half-way, a connection that goes silent, a Retry-After), which the
 * service itself never does on cue.
 */

type Script = (request: http.IncomingMessage, response: http.ServerResponse, hit: number) => void;
type Hit = { at: number; headers: http.IncomingHttpHeaders; body: string };

const servers: http.Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

/** A server answering its n-th request (from 0) as `script` says; `hits` records each request. */
async function scripted(script: Script): Promise<{ url: string; hits: Hit[] }> {
  const hits: Hit[] = [];
  const server = http.createServer((request, response) => {
    let body = '';
    request.on('data', (chunk: Buffer) => (body += chunk.toString()));
    request.on('end', () => {
      hits.push({ at: Date.now(), headers: request.headers, body });
      script(request, response, hits.length - 1);
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, hits };
}

const workspace = { id: 'ws_V1StGXR8_Z5jdHi6B-myT', organization_id: 'org_a', name: 'Research' };
const answer = (response: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  response.writeHead(status, { 'content-type': 'application/json', ...headers });
  response.end(JSON.stringify(body));
};
const unavailable = { error: { code: 'unavailable', message: 'try again', request_id: 'r-1' } };

describe('the typed client over a real network', () => {
  it('retries an answer cut off half-way with the same key, and without retries says the connection was lost', async () => {
    const server = await scripted((_request, response, hit) => {
      if (hit === 0) {
        response.writeHead(200, { 'content-type': 'application/json', 'content-length': '500' });
        response.write('{"data": {"id": "ws_');
        setTimeout(() => response.socket?.destroy(), 20);
      } else answer(response, 200, { data: workspace });
    });
    const api = createClient({ baseUrl: server.url, token: 't', retryDelayMs: 10 });
    expect(await api.createWorkspace({ organization_id: 'org_a', name: 'Research' })).toEqual(workspace);
    expect(server.hits).toHaveLength(2);
    expect(server.hits[1]!.headers['idempotency-key']).toBe(server.hits[0]!.headers['idempotency-key']);

    const cutOff = await scripted((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json', 'content-length': '500' });
      response.write('{"data": ');
      setTimeout(() => response.socket?.destroy(), 20);
    });
    const once = createClient({ baseUrl: cutOff.url, token: 't', retries: 0 });
    const failure = await once.createWorkspace({ organization_id: 'org_a', name: 'Research' }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(ServiceUnreachable);
    // The key it was sent with, to send the command again later, done once.
    expect((failure as ServiceUnreachable).idempotencyKey).toBe(cutOff.hits[0]!.headers['idempotency-key']);
  });

  it('counts a try that goes silent as a lost connection after timeoutMs, and a long poll gets its wait on top', async () => {
    const server = await scripted((request, response, hit) => {
      if (hit === 0) return; // never answers
      answer(response, 200, { data: workspace });
    });
    const api = createClient({ baseUrl: server.url, token: 't', retryDelayMs: 10, timeoutMs: 300 });
    const started = performance.now();
    expect(await api.getWorkspace({ id: workspace.id })).toEqual(workspace);
    expect(server.hits).toHaveLength(2);
    // Timed by the client, whose try began the 300 ms (a timer may fire a millisecond early by this clock).
    expect(performance.now() - started).toBeGreaterThanOrEqual(295);

    const longPoll = await scripted((_request, response) => {
      setTimeout(() => answer(response, 200, { data: { items: [], next: 'AAAAAAAAAAAAAAAAAAAAAA', has_more: false } }), 600);
    });
    const poller = createClient({ baseUrl: longPoll.url, token: 't', retries: 0, timeoutMs: 300 });
    expect(await poller.listChanges({ wait_ms: 1000 })).toMatchObject({ items: [] });
  });

  it('drops a change stream that goes silent, heartbeat and all, and reconnects from the last change', async () => {
    const change = (id: string) => ({ id, type: 'WorkspaceCreated', data: { id: 'ws_x' } });
    const server = await scripted((_request, response, hit) => {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.write(`id: ${hit === 0 ? 'A' : 'B'}\nevent: WorkspaceCreated\ndata: ${JSON.stringify(change(hit === 0 ? 'A' : 'B'))}\n\n`);
      // Then silence: no heartbeat, no end, the connection open.
    });
    const abort = new AbortController();
    const api = createClient({ baseUrl: server.url, token: 't', retryDelayMs: 10, streamIdleMs: 300 });
    const seen: string[] = [];
    for await (const received of api.streamChanges({}, { signal: abort.signal })) {
      seen.push(received.id);
      if (seen.length === 2) abort.abort();
    }
    expect(seen).toEqual(['A', 'B']);
    expect(server.hits[1]!.headers['last-event-id']).toBe('A');
  });

  it('waits as long as a 503 says in Retry-After, and shows a 429 its Retry-After', async () => {
    const server = await scripted((_request, response, hit) => {
      if (hit === 0) answer(response, 503, unavailable, { 'retry-after': '1' });
      else answer(response, 200, { data: workspace });
    });
    const api = createClient({ baseUrl: server.url, token: 't', retryDelayMs: 10 });
    expect(await api.getWorkspace({ id: workspace.id })).toEqual(workspace);
    expect(server.hits[1]!.at - server.hits[0]!.at).toBeGreaterThanOrEqual(1000);

    const limited = await scripted((_request, response) =>
      answer(response, 429, { error: { code: 'rate_limited', message: 'slow down', request_id: 'r-2' } }, { 'retry-after': '7' }),
    );
    const refused = await createClient({ baseUrl: limited.url, token: 't' })
      .getWorkspace({ id: workspace.id })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(ApiError);
    expect(refused).toMatchObject({ status: 429, code: 'rate_limited', retryAfterSeconds: 7 });
  });

  it("throws the caller's own mistakes as they are: a token function that fails, a baseUrl that is not a URL", async () => {
    const server = await scripted((_request, response) => answer(response, 200, { data: workspace }));
    const api = createClient({
      baseUrl: server.url,
      token: () => {
        throw new Error('the token store is locked');
      },
    });
    await expect(api.getWorkspace({ id: workspace.id })).rejects.toThrow('the token store is locked');
    expect(server.hits).toHaveLength(0);
    expect(() => createClient({ baseUrl: '127.0.0.1:8080', token: 't' })).toThrow(TypeError);
  });

  it('a page-through whose signal aborts between pages ends with the abort, not as if the feed had ended', async () => {
    const server = await scripted((_request, response) =>
      answer(response, 200, { data: { items: [{ id: 'A', type: 'WorkspaceCreated', data: {} }], next: 'A', has_more: true } }),
    );
    const abort = new AbortController();
    const api = createClient({ baseUrl: server.url, token: 't' });
    const reading = (async () => {
      for await (const _change of api.changes({}, { signal: abort.signal })) abort.abort();
    })();
    await expect(reading).rejects.toMatchObject({ name: 'AbortError' });
  });
});
