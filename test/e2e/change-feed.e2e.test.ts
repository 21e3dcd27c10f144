import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import net from 'node:net';
import { pino } from 'pino';
import { mintToken } from '../../src/api/tokens.js';
import { rebuildReadModel } from '../../src/projections/rebuild/index.js';
import { ApiError, createClient, type Change } from '../../src/client/index.js';
import { CuttableProxy } from '../support/cuttable-proxy.js';
import { testSecret } from '../support/secret.js';
import { startTestService, type TestService } from '../support/service.js';
import { conformingFetch } from '../support/openapi-conformance.js';
import { clientFor, expectError, expectValidation, jsonHeaders, ok, rawPost, sleep } from './helpers.js';

/** Contract §14: the change feed, paged, filtered, long-polled and streamed, in both event-store modes. */
describe('change feed', () => {
  let service: TestService;
  let token: string;
  const org = 'org_feed';
  const otherOrg = 'org_feed_other';
  let workspace: any;
  let solution: any;

  /** Every change the token sees, following `next` in pages of `limit`. */
  async function allChanges(as: string, params: Record<string, unknown> = {}, limit = 2): Promise<Change[]> {
    const seen: Change[] = [];
    let after: string | undefined;
    for (;;) {
      const page = await ok(service, as, 'list_changes', { ...params, limit, ...(after ? { after } : {}) });
      seen.push(...page.items);
      after = page.next;
      if (!page.has_more) return seen;
    }
  }

  /** Reads Server-Sent Events from a response until `count` changes came; returns them and the comments seen. */
  async function readEvents(response: Response, count: number): Promise<{ changes: Change[]; ids: string[] }> {
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    const changes: Change[] = [];
    const ids: string[] = [];
    while (changes.length < count) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = text.indexOf('\n\n')) >= 0) {
        const block = text.slice(0, end);
        text = text.slice(end + 2);
        const id = /^id: (.*)$/m.exec(block)?.[1];
        const data = /^data: (.*)$/m.exec(block)?.[1];
        if (id && data) {
          ids.push(id);
          changes.push(JSON.parse(data) as Change);
        }
      }
    }
    await reader.cancel();
    return { changes: changes.slice(0, count), ids: ids.slice(0, count) };
  }

  const stream = (as: string, params: Record<string, unknown> = {}, headers: Record<string, string> = {}, signal?: AbortSignal) =>
    fetch(`${service.url}/api`, {
      method: 'POST',
      headers: { ...jsonHeaders(as), accept: 'text/event-stream', ...headers },
      body: JSON.stringify({ query: 'list_changes', params }),
      ...(signal ? { signal } : {}),
    });

  beforeAll(async () => {
    service = await startTestService({ env: { CHANGE_STREAMS_PER_CALLER: '2' } });
    token = await service.token([org, otherOrg]);
    workspace = await ok(service, token, 'create_workspace', { organization_id: org, name: 'Feed' });
    solution = await ok(service, token, 'create_solution', { workspace_id: workspace.id, name: 'S' });
    await ok(service, token, 'update_workspace', { id: workspace.id, name: 'Feed 2' });
    await ok(service, token, 'update_solution', { id: solution.id, name: 'S2', attributes: { a: 1 } });
    await ok(service, token, 'create_workspace', { organization_id: otherOrg, name: 'Other' });
  });
  afterAll(() => service?.close());

  it('shows every change once across pages, in log order, each as in the record history', async () => {
    const changes = await allChanges(token, { organization_id: org });
    expect(changes.map((change) => change.type)).toEqual(['WorkspaceCreated', 'SolutionCreated', 'WorkspaceUpdated', 'SolutionUpdated']);
    expect(new Set(changes.map((change) => change.id)).size).toBe(4);
    const history = await ok(service, token, 'get_solution_history', { id: solution.id, page: 1, size: 10 });
    const solutionChanges = changes.filter((change) => change.solution_id === solution.id);
    // The history's items, without the hashes history adds (contract §16).
    const asInHistory = ({ version, type, occurred_at, actor, data }: Record<string, unknown>) => ({
      version,
      type,
      occurred_at,
      actor,
      data,
    });
    expect(solutionChanges.map(asInHistory)).toEqual(history.items.map(asInHistory));
    expect(solutionChanges[1]).toMatchObject({ organization_id: org, workspace_id: workspace.id, version: 2 });
    expect(changes[2]).toMatchObject({ organization_id: org, workspace_id: workspace.id, version: 2 });
    expect(changes[2]).not.toHaveProperty('solution_id');
    // The same walk in one page gives the same changes.
    expect(await allChanges(token, { organization_id: org }, 1000)).toEqual(changes);
  });

  it("never shows another organization's changes, and narrows kinds by scope and filters", async () => {
    const stranger = await service.token(['org_feed_stranger']);
    await ok(service, stranger, 'create_workspace', { organization_id: 'org_feed_stranger', name: 'Mine' });
    const theirs = await allChanges(stranger);
    expect(theirs.map((change) => change.organization_id)).toEqual(['org_feed_stranger']);
    expect((await allChanges(token)).some((change) => change.organization_id === 'org_feed_stranger')).toBe(false);

    const workspacesOnly = await service.token([org], 'workspaces:read');
    expect((await allChanges(workspacesOnly)).map((change) => change.type)).toEqual(['WorkspaceCreated', 'WorkspaceUpdated']);
    const solutionsOnly = await service.token([org], 'solutions:read');
    expect((await allChanges(solutionsOnly)).map((change) => change.type)).toEqual(['SolutionCreated', 'SolutionUpdated']);
    expect((await allChanges(token, { types: ['SolutionUpdated'] })).map((change) => change.solution_id)).toEqual([solution.id]);
    expect((await allChanges(token, { workspace_id: workspace.id })).length).toBe(4);
    expect(await allChanges(token, { organization_id: 'org_not_mine' })).toEqual([]);
    expect(await allChanges(stranger, { workspace_id: workspace.id })).toEqual([]);

    const noReads = await service.token([org], 'workspaces:write');
    expectError(await rawPost(service, JSON.stringify({ query: 'list_changes', params: {} }), jsonHeaders(noReads)), 403, 'forbidden');
  });

  it('refuses malformed cursors and bounds', async () => {
    const call = (params: unknown) => rawPost(service, JSON.stringify({ query: 'list_changes', params }), jsonHeaders(token));
    expectValidation(await call({ after: 'not a cursor' }), 'params.after');
    expectValidation(await call({ after: 'A'.repeat(129) }), 'params.after');
    expectValidation(await call({ limit: 1001 }), 'params.limit');
    expectValidation(await call({ wait_ms: 30_001 }), 'params.wait_ms');
    expectValidation(await call({ types: [] }), 'params.types');
    expectValidation(await call({ types: ['Nope'] }), 'params.types.0');
    // Contract §14 allows any non-empty list of the six: a repeat filters nothing twice.
    const repeated = await call({ types: ['SolutionUpdated', 'SolutionUpdated'] });
    expect(repeated.status).toBe(200);
  });

  it('continues from `next` after the end, and a long poll wakes for a change made meanwhile', async () => {
    const end = await ok(service, token, 'list_changes', { organization_id: org, limit: 1000 });
    const empty = await ok(service, token, 'list_changes', { organization_id: org, after: end.next });
    expect(empty).toEqual({ items: [], next: end.next, has_more: false });
    const started = Date.now();
    const polling = ok(service, token, 'list_changes', { organization_id: org, after: end.next, wait_ms: 20_000 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const created = await ok(service, token, 'create_solution', { workspace_id: workspace.id, name: 'Late' });
    const woken = await polling;
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(woken.items.map((change) => change.solution_id)).toEqual([created.id]);
    // Nothing new: the wait runs out and answers an empty page.
    expect((await ok(service, token, 'list_changes', { organization_id: org, after: woken.next, wait_ms: 300 })).items).toEqual([]);
  });

  it('streams Server-Sent Events, resumes with Last-Event-ID exactly, and the client follows both ways', async () => {
    const expected = await allChanges(token, { organization_id: org }, 1000);
    const response = await stream(token, { organization_id: org });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const first = await readEvents(response, 2);
    expect(first.changes).toEqual(expected.slice(0, 2));
    expect(first.ids).toEqual(expected.slice(0, 2).map((change) => change.id));

    const resumed = await stream(token, { organization_id: org }, { 'last-event-id': first.ids[1]! });
    // The rest, then a change made while streaming.
    const reading = readEvents(resumed, expected.length - 2 + 1);
    await ok(service, token, 'update_workspace', { id: workspace.id, name: 'Feed 3' });
    const rest = await reading;
    expect(rest.changes.slice(0, expected.length - 2)).toEqual(expected.slice(2));
    expect(rest.changes.at(-1)).toMatchObject({ type: 'WorkspaceUpdated', data: { name: 'Feed 3' } });

    const client = clientFor(service, token);
    const paged: Change[] = [];
    for await (const change of client.changes({ organization_id: org, limit: 2 })) paged.push(change);
    expect(paged.slice(0, expected.length)).toEqual(expected);
    const controller = new AbortController();
    const streamed: Change[] = [];
    for await (const change of client.streamChanges({ organization_id: org }, { signal: controller.signal })) {
      streamed.push(change);
      if (streamed.length === paged.length) controller.abort();
    }
    expect(streamed).toEqual(paged);
  });

  it('lets the client follow the feed both ways across seconds without the service, and end without an error when its signal aborts', async () => {
    const proxy = new CuttableProxy({ host: '127.0.0.1', port: Number(new URL(service.url).port) });
    await proxy.open();
    // Three retries 50, 100 and 200 ms apart: far less than the time the service is away.
    const client = createClient({ baseUrl: `http://127.0.0.1:${proxy.port}`, token, retryDelayMs: 50, fetch: conformingFetch });
    const start = (await ok(service, token, 'list_changes', { organization_id: org, limit: 1000 })).next;
    const controller = new AbortController();
    const followed: Change[] = [];
    const streamed: Change[] = [];
    const following = (async () => {
      const params = { organization_id: org, after: start, wait_ms: 500 };
      for await (const change of client.changes(params, { follow: true, signal: controller.signal })) followed.push(change);
    })();
    const streaming = (async () => {
      for await (const change of client.streamChanges({ organization_id: org, after: start }, { signal: controller.signal }))
        streamed.push(change);
    })();
    const seenByBoth = async (count: number) => {
      for (let waited = 0; followed.length < count || streamed.length < count; waited += 50) {
        if (waited > 20_000) throw new Error(`followed ${followed.length}, streamed ${streamed.length} of ${count} changes`);
        await sleep(50);
      }
    };
    await ok(service, token, 'update_workspace', { id: workspace.id, name: 'Before the cut' });
    await seenByBoth(1);
    await proxy.cut();
    await ok(service, token, 'update_workspace', { id: workspace.id, name: 'During the cut' });
    await sleep(2_000);
    await proxy.open();
    await seenByBoth(2);
    controller.abort();
    await Promise.all([following, streaming]);
    await proxy.cut();
    const names = (changes: Change[]) => changes.map((change) => (change.data as { name?: string }).name);
    expect(names(followed)).toEqual(['Before the cut', 'During the cut']);
    expect(names(streamed)).toEqual(['Before the cut', 'During the cut']);
    // Without follow, an abort is not the end of the feed: the page-through says it was cut short.
    const pageThrough = client.changes({ organization_id: org }, { signal: AbortSignal.abort() });
    await expect(pageThrough.next()).rejects.toThrow();
  });

  it('lets the client back off from streams that end without a change, whether cut or ended cleanly, rather than reconnect at once', async () => {
    // A proxy that lets each stream's answer begin (its headers and first chunk: the opening comment,
    // from the end of the feed), then cuts the connection or ends the answer cleanly: streams that
    // deliver nothing, again and again.
    const end = (await ok(service, token, 'list_changes', { organization_id: org, limit: 1000 })).next;
    for (const ending of ['cut', 'end'] as const) {
      const proxy = net.createServer((client) => {
        const upstream = net.connect(Number(new URL(service.url).port), '127.0.0.1');
        for (const socket of [client, upstream]) socket.on('error', () => undefined);
        client.pipe(upstream);
        let answer = '';
        upstream.on('data', (chunk: Buffer) => {
          answer += chunk.toString('latin1');
          // Latin-1: one character a byte, as chunk sizes count.
          const headers = answer.indexOf('\r\n\r\n') + 4;
          const size = /^([0-9a-f]+)\r\n/i.exec(answer.slice(headers));
          if (headers < 4 || !size) return;
          const firstChunkEnd = headers + size[0].length + parseInt(size[1]!, 16) + 2;
          if (answer.length < firstChunkEnd) return;
          upstream.destroy();
          const head = answer.slice(0, firstChunkEnd);
          if (ending === 'cut') client.end(head, 'latin1', () => client.destroy());
          else client.end(`${head}0\r\n\r\n`, 'latin1');
        });
        client.on('close', () => upstream.destroy());
      });
      await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
      let requests = 0;
      const client = createClient({
        baseUrl: `http://127.0.0.1:${(proxy.address() as net.AddressInfo).port}`,
        token,
        retryDelayMs: 50,
        fetch: (input, init) => ((requests += 1), conformingFetch(input, init)),
      });
      const controller = new AbortController();
      const streamed: Change[] = [];
      const streaming = (async () => {
        for await (const change of client.streamChanges({ organization_id: org, after: end }, { signal: controller.signal }))
          streamed.push(change);
      })();
      // Backing off from 50 ms, doubling: about 6 tries in 2 s. Reconnecting at once: hundreds.
      await sleep(2_000);
      controller.abort();
      await streaming;
      await new Promise((resolve) => proxy.close(resolve));
      expect(streamed).toEqual([]);
      expect(requests, ending).toBeGreaterThanOrEqual(2);
      expect(requests, ending).toBeLessThanOrEqual(12);
    }
  });

  it('shows every change exactly once to a reader paging while other clients write', async () => {
    const busy = 'org_feed_busy';
    const writer = await service.token([busy]);
    const start = (await ok(service, writer, 'list_changes', { limit: 1000 })).next;
    const writing = Promise.all(
      Array.from({ length: 4 }, (_, client) =>
        (async () => {
          for (let i = 0; i < 8; i++) await ok(service, writer, 'create_workspace', { organization_id: busy, name: `C${client}-${i}` });
        })(),
      ),
    );
    const seen: Change[] = [];
    let after = start;
    let done = false;
    void writing.then(() => (done = true));
    for (;;) {
      const finished = done;
      const page = await ok(service, writer, 'list_changes', { after, limit: 3 });
      seen.push(...page.items);
      after = page.next;
      if (finished && !page.has_more) break;
    }
    await writing;
    expect(seen).toHaveLength(32);
    expect(new Set(seen.map((change) => change.id)).size).toBe(32);
    expect(seen).toEqual(await allChanges(writer, {}, 1000));
  });

  it('continues exactly from a cursor taken before a projection rebuild, and shows changes made after it', async () => {
    const before = await allChanges(token, { organization_id: org }, 1000);
    const middle = before[1]!.id;
    await rebuildReadModel({ connectionString: service.databaseUrl, store: service.runtime.store, logger: pino({ level: 'silent' }) });
    expect(await allChanges(token, { organization_id: org, after: middle }, 2)).toEqual(before.slice(2));
    const created = await ok(service, token, 'create_workspace', { organization_id: org, name: 'After the rebuild' });
    const after = await allChanges(token, { organization_id: org, after: before.at(-1)!.id });
    expect(after.map((change) => change.workspace_id)).toEqual([created.id]);
  });

  it('refuses a bad Last-Event-ID and streams past the per-caller limit with JSON 429s', async () => {
    expectValidation(
      await rawPost(service, JSON.stringify({ query: 'list_changes', params: {} }), {
        ...jsonHeaders(token),
        accept: 'text/event-stream',
        'last-event-id': 'nope',
      }),
      'headers.last-event-id',
    );
    // An Accept that refuses the event stream (q=0) gets the JSON page, whatever else it names.
    for (const accept of ['text/event-stream;q=0, application/json', 'application/json, text/event-stream; q=0.0']) {
      const page = await rawPost(service, JSON.stringify({ query: 'list_changes', params: { organization_id: org, limit: 1 } }), {
        ...jsonHeaders(token),
        accept,
      });
      expect(page.status, accept).toBe(200);
      expect(page.headers.get('content-type')).toMatch(/^application\/json/);
      expect(page.body.data.items).toHaveLength(1);
    }
    expect(
      (
        await stream(
          token,
          { organization_id: org },
          { accept: 'application/json;q=0.5, TEXT/EVENT-STREAM;q=0.9' },
          AbortSignal.timeout(2_000),
        )
      ).headers.get('content-type'),
    ).toMatch(/^text\/event-stream/);
    const limited = await service.token([org], undefined, 'streamer');
    const controller = new AbortController();
    const open = [await stream(limited, {}, {}, controller.signal), await stream(limited, {}, {}, controller.signal)];
    for (const response of open) expect(response.status).toBe(200);
    const refused = await rawPost(service, JSON.stringify({ query: 'list_changes', params: {} }), {
      ...jsonHeaders(limited),
      accept: 'text/event-stream',
    });
    expectError(refused, 429, 'rate_limited');
    expect(refused.headers.get('retry-after')).toMatch(/^\d+$/);
    controller.abort();
  });

  it('serves a stream for as long as its token is accepted: past `exp`, within the 30 s clock tolerance, then ends it', async () => {
    // Expired 25 s ago: accepted for about 5 s more (contract §3), as a page and as a stream alike.
    const lateToken = await mintToken(testSecret, { subject: 'late', organizations: [org], expiresIn: '-25s' });
    const start = (await ok(service, lateToken, 'list_changes', { organization_id: org, limit: 1000 })).next;
    const response = await stream(lateToken, { organization_id: org, after: start });
    expect(response.status).toBe(200);
    // The client follows with the same token until the service refuses it, then ends with the refusal.
    let requests = 0;
    const client = createClient({
      baseUrl: service.url,
      token: lateToken,
      retryDelayMs: 50,
      fetch: (input, init) => ((requests += 1), conformingFetch(input, init)),
    });
    const followed: Change[] = [];
    const following = (async () => {
      for await (const change of client.streamChanges({ organization_id: org, after: start })) followed.push(change);
    })();
    // A change made once the stream is open reaches it: the stream did not end at `exp`.
    const reading = readEvents(response, 1);
    await ok(service, token, 'update_workspace', { id: workspace.id, name: 'Streamed past exp' });
    const { changes } = await reading;
    expect(changes.map((change) => (change.data as { name?: string }).name)).toEqual(['Streamed past exp']);
    const refusal = await following.then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refusal).toBeInstanceOf(ApiError);
    expect(refusal).toMatchObject({ status: 401, code: 'unauthenticated' });
    expect(followed.map((change) => (change.data as { name?: string }).name)).toEqual(['Streamed past exp']);
    // One stream for as long as the token was accepted, then the refused reconnection (a spare for a race at the very end).
    expect(requests).toBeGreaterThanOrEqual(2);
    expect(requests).toBeLessThanOrEqual(4);
    // It ends by itself, when the token is no longer accepted (a 401 from then on), rather than going on.
    const rest = await stream(lateToken, { organization_id: org, after: changes[0]!.id });
    if (rest.status === 200) expect(await rest.text()).toMatch(/^: change stream\n\n/);
    expectError(
      await rawPost(service, JSON.stringify({ query: 'list_changes', params: {} }), jsonHeaders(lateToken)),
      401,
      'unauthenticated',
    );
  });
});
