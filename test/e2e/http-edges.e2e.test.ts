import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawHttp } from '../support/raw-http.js';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { expectError, expectOk, jsonHeaders, rawPost } from './helpers.js';

describe('requests the HTTP layer answers before the app (contract §1)', () => {
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService();
  });
  afterAll(() => service?.close());

  it.each(['POST /%zz', 'POST /api%zz', 'GET /%zz', 'DELETE /api/%E0%A4%A'])(
    '%s: 400 bad_request with a request id, nothing naming the framework',
    async (line) => {
      const response = await rawHttp(service, `${line} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
      expectError(response, 400, 'bad_request');
      expect(response.text).not.toMatch(/FST_|fastify/i);
    },
  );

  it('headers over the size limit: 431 with the contract body and a request id', async () => {
    const response = await rawHttp(service, `GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    expectError(response, 431, 'bad_request');
  });

  it('more headers than Node keeps (it drops the rest unsaid): 431, not an answer to a request missing some of them', async () => {
    const headers = (count: number) => 'a: 1\r\n'.repeat(count);
    const body = '{"query":"list_workspaces","params":{"page":1,"size":1}}';
    // 3,000 tiny headers are 6 KB of names and values, under the 16 KiB; the Content-Type after them would be dropped (415).
    const many = await rawHttp(
      service,
      `POST /api HTTP/1.1\r\nHost: localhost\r\n${headers(3000)}Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    );
    expectError(many, 431, 'bad_request');
    expect(many.body.error.message).toBe('the request has too many headers (at most 128)');
    expectError(await rawHttp(service, `GET /healthz HTTP/1.1\r\nHost: localhost\r\n${headers(128)}\r\n`), 431, 'bad_request');
    const most = await rawHttp(service, `GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n${headers(126)}\r\n`);
    expect(most.status).toBe(200);
  });

  it('HTTP/1.1 without a Host header: 400 with the contract body and a request id (HTTP/1.0 needs none)', async () => {
    const response = await rawHttp(service, 'GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n');
    expectError(response, 400, 'bad_request');
    expect(response.body.error.message).toBe('the request has no Host header');
    expect((await rawHttp(service, 'GET /healthz HTTP/1.0\r\n\r\n')).status).toBe(200);
  });

  it('an Expect header other than 100-continue is ignored: the request is answered as without it', async () => {
    const healthz = await rawHttp(service, 'GET /healthz HTTP/1.1\r\nHost: localhost\r\nExpect: 200-ok\r\nConnection: close\r\n\r\n');
    expect(healthz.status).toBe(200);
    expect(healthz.body).toEqual({ status: 'ok' });
    const body = '{"query":"list_workspaces","params":{"page":1,"size":1}}';
    const api = await rawHttp(
      service,
      `POST /api HTTP/1.1\r\nHost: localhost\r\nExpect: foo\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    );
    expectError(api, 401, 'unauthenticated');
  });

  it('CONNECT, to any target: 404 with the contract body and a request id, like any other method the service does not serve', async () => {
    for (const target of ['/api', '127.0.0.1:443']) {
      const response = await rawHttp(service, `CONNECT ${target} HTTP/1.1\r\nHost: localhost\r\nx-request-id: connect-1\r\n\r\n`);
      expectError(response, 404, 'not_found');
      expect(response.headers.get('x-request-id')).toBe('connect-1');
      expect(response.body.error.request_id).toBe('connect-1');
    }
  });

  it('a malformed request line: 400 with the contract body and a request id', async () => {
    const response = await rawHttp(service, 'THIS IS NOT HTTP\r\n\r\n');
    expectError(response, 400, 'bad_request');
    expect(response.text).not.toMatch(/Client Error|statusCode/);
  });
});

describe('a client that stops sending its request (REQUEST_TIMEOUT_MS)', () => {
  const org = 'org_slow';
  let service: TestService;
  let token: string;
  beforeAll(async () => {
    service = await startTestService({ env: { REQUEST_TIMEOUT_MS: '1000' } });
    token = await service.token([org]);
  });
  afterAll(() => service?.close());

  const body = `{"query":"create_workspace","params":{"organization_id":"${org}","name":"slow"}}`;
  const total = async () => expectOk(await callApi(service, token, 'list_workspaces', { organization_id: org, page: 1, size: 1 })).total;

  it('a body that stops arriving: 400 with the contract body and a request id, the connection closed, nothing stored', async () => {
    const started = performance.now();
    const response = await rawHttp(
      service,
      `POST /api HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\n` +
        `x-request-id: slow-body-1\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 20)}`,
      { unfinished: true },
    );
    expectError(response, 400, 'bad_request');
    expect(response.body.error.message).toBe('the request was not received in time');
    // Not a bound on speed: the answer must come from the timeout (1 s, checked every 0.1 s), not from anything sooner.
    expect(performance.now() - started).toBeGreaterThanOrEqual(900);
    expect(await total()).toBe(0);
  });

  it('headers that stop arriving: the same answer', async () => {
    const response = await rawHttp(service, 'POST /api HTTP/1.1\r\nHost: localhost\r\nContent-Type: application', { unfinished: true });
    expectError(response, 400, 'bad_request');
    expect(response.body.error.message).toBe('the request was not received in time');
  });

  it('only receiving the request is timed: a long poll that waits longer than the timeout is answered as usual', async () => {
    const page = expectOk(await callApi(service, token, 'list_changes', { organization_id: org, wait_ms: 2500 }));
    expect(page.items).toEqual([]);
    expect(await total()).toBe(0);
  });
});

describe('bodies are stored exactly as sent, or refused', () => {
  const org = 'org_exact';
  let service: TestService;
  let token: string;
  beforeAll(async () => {
    service = await startTestService();
    token = await service.token([org]);
  });
  afterAll(() => service?.close());

  const total = async () => expectOk(await callApi(service, token, 'list_workspaces', { organization_id: org, page: 1, size: 1 })).total;

  it('a body that is not valid UTF-8 (a lone surrogate, ed a0 80, inside a string) is bad_request, and nothing is stored', async () => {
    const before = await total();
    const body = Buffer.concat([
      Buffer.from(`{"query":"create_workspace","params":{"organization_id":"${org}","name":"bad `),
      Buffer.from([0xed, 0xa0, 0x80]),
      Buffer.from('"}}'),
    ]);
    expectError(await rawPost(service, body, jsonHeaders(token)), 400, 'bad_request');
    expect(await total()).toBe(before);
  });

  it.each([
    ['9007199254740993', 'params.attributes.big'],
    ['1e-400', 'params.attributes.big'],
    ['-12345678901234567', 'params.attributes.big'],
    // Seventeen or more significant digits on both sides of the point, no run of sixteen.
    ['123456789.123456789', 'params.attributes.big'],
    ['12345678.90123456789', 'params.attributes.big'],
  ])('the number %s, which a double cannot hold, is a validation_error naming %s, and nothing is stored', async (number, path) => {
    const before = await total();
    const body = `{"query":"create_workspace","params":{"organization_id":"${org}","name":"n","attributes":{"big":${number}}}}`;
    const response = await rawPost(service, body, jsonHeaders(token));
    expectError(response, 400, 'validation_error');
    expect(response.body.error.details).toEqual([{ path, message: expect.stringContaining('exactly') }]);
    expect(await total()).toBe(before);
  });

  // Longer than any literal a double needs: the whole literal counts, not its first few hundred characters.
  it.each([
    ['1.000…0001', `1.${'0'.repeat(420)}1`],
    ['0.000…0001', `0.${'0'.repeat(420)}1`],
    ['-1.000…0001', `-1.${'0'.repeat(420)}1`],
  ])('the %s of 423 characters and more is a validation_error, and nothing is stored', async (_label, number) => {
    const before = await total();
    const body = `{"query":"create_workspace","params":{"organization_id":"${org}","name":"n","attributes":{"long":${number}}}}`;
    const response = await rawPost(service, body, jsonHeaders(token));
    expectError(response, 400, 'validation_error');
    expect(response.body.error.details).toEqual([{ path: 'params.attributes.long', message: expect.stringContaining('exactly') }]);
    expect(await total()).toBe(before);
  });

  it('a long literal that a double holds exactly (trailing zeros) is stored as its value', async () => {
    const body = `{"query":"create_workspace","params":{"organization_id":"${org}","name":"n","attributes":{"long":1.${'0'.repeat(500)}}}}`;
    const response = await rawPost(service, body, jsonHeaders(token));
    expect(response.status).toBe(200);
    expect(response.body.data.attributes).toEqual({ long: 1 });
  });

  it("a number out of a parameter's range is told so, and not also to be sent as a string", async () => {
    const body = `{"query":"get_workspace_history","params":{"id":"ws_x","page":9007199254740993,"size":10}}`;
    const response = await rawPost(service, body, jsonHeaders(token));
    expectError(response, 400, 'validation_error');
    expect(response.body.error.details).toEqual([{ path: 'params.page', message: expect.not.stringContaining('exactly') }]);
  });

  it('a body with a Content-Encoding other than identity is 415, compressed or not, and nothing is stored', async () => {
    const before = await total();
    const body = JSON.stringify({ query: 'create_workspace', params: { organization_id: org, name: 'Encoded' } });
    for (const [coding, bytes] of [
      ['gzip', gzipSync(body)],
      ['gzip', Buffer.from(body)],
      ['br', Buffer.from(body)],
      ['foo', Buffer.from(body)],
    ] as const) {
      const response = await rawPost(service, bytes, { ...jsonHeaders(token), 'content-encoding': coding });
      expectError(response, 415, 'unsupported_media_type');
      expect(response.body.error.message).toBe('the body must not be compressed: Content-Encoding is not supported');
    }
    expect(await total()).toBe(before);
    expectOk(await rawPost(service, body, { ...jsonHeaders(token), 'content-encoding': 'identity' }));
    expect(await total()).toBe(before + 1);
  });

  it('a body with a Transfer-Encoding other than chunked is 415 too, and nothing is stored', async () => {
    const before = await total();
    const body = JSON.stringify({ query: 'create_workspace', params: { organization_id: org, name: 'Transfer-encoded' } });
    const chunked = (coding: string, bytes: Buffer) =>
      Buffer.concat([
        Buffer.from(
          `POST /api HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\n` +
            `Transfer-Encoding: ${coding}\r\nConnection: close\r\n\r\n${bytes.length.toString(16)}\r\n`,
        ),
        bytes,
        Buffer.from('\r\n0\r\n\r\n'),
      ]);
    for (const [coding, bytes] of [
      ['gzip, chunked', gzipSync(body)],
      ['GZIP , chunked', Buffer.from(body)],
      ['deflate, chunked', Buffer.from(body)],
    ] as const) {
      const response = await rawHttp(service, chunked(coding, bytes), { unfinished: true });
      expectError(response, 415, 'unsupported_media_type');
      expect(response.body.error.message).toBe('the body must not be compressed: only chunked Transfer-Encoding is supported');
    }
    expect(await total()).toBe(before);
    expect((await rawHttp(service, chunked('chunked', Buffer.from(body)), { unfinished: true })).status).toBe(200);
    expect(await total()).toBe(before + 1);
  });

  it('numbers a double holds are stored and read back as sent, in attributes and documentation alike', async () => {
    const body =
      `{"query":"create_workspace","params":{"organization_id":"${org}","name":"exact",` +
      `"attributes":{"a":1.5e3,"b":0.1,"c":123456789012345,"d":[1e21,-0.5,9007199254740991],"e":{"f":2.50}}}}`;
    const created = expectOk(await rawPost(service, body, jsonHeaders(token)));
    const read = expectOk(await callApi(service, token, 'get_workspace', { id: created.id }));
    expect(read.attributes).toEqual({ a: 1500, b: 0.1, c: 123456789012345, d: [1e21, -0.5, 9007199254740991], e: { f: 2.5 } });
  });
});

describe('as_of takes any RFC 3339 instant, and both reads treat every instant alike (contract §12)', () => {
  const org = 'org_as_of';
  let service: TestService;
  let token: string;
  let workspace: { id: string; created_at: string };
  let solution: { id: string };
  beforeAll(async () => {
    service = await startTestService();
    token = await service.token([org]);
    workspace = expectOk(await callApi(service, token, 'create_workspace', { organization_id: org, name: 'Then' }));
    solution = expectOk(await callApi(service, token, 'create_solution', { workspace_id: workspace.id, name: 'Then' }));
  });
  afterAll(() => service?.close());

  const read = (kind: 'workspace' | 'solution', as_of: string) =>
    callApi(service, token, `get_${kind}`, { id: kind === 'workspace' ? workspace.id : solution.id, as_of });

  it.each([
    ['the first instant of year 0000', '0000-01-01T00:00:00.000000Z', 404],
    ['an instant before it once its offset is applied', '0000-01-01T00:00:00+01:00', 404],
    ['the last instant of year 9999', '9999-12-31T23:59:59.999999Z', 200],
    ['an instant after it once its offset is applied', '9999-12-31T23:59:59.999999-14:00', 200],
    ['a numeric offset and no fraction', '9000-01-01T00:00:00+05:30', 200],
    ['three fractional digits', '9000-01-01T00:00:00.123Z', 200],
    ['a lower-case t and z', '9000-01-01t00:00:00.5z', 200],
  ])('%s (%s): %i from both operations', async (_, asOf, status) => {
    for (const kind of ['workspace', 'solution'] as const) {
      const response = await read(kind, asOf);
      expect({ kind, status: response.status }).toEqual({ kind, status });
      if (status === 404) expectError(response, 404, 'not_found');
      else expect(response.body.data.created_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
    }
  });

  it('an offset is honoured: the instant just before creation, written in another zone, is 404', async () => {
    const created = new Date(Date.parse(workspace.created_at.slice(0, 23) + 'Z') - 1);
    const local = new Date(created.getTime() + 2 * 3600_000).toISOString().slice(0, 23);
    expectError(await read('workspace', `${local}+02:00`), 404, 'not_found');
    expect((await read('workspace', `${new Date(created.getTime() + 2 * 3600_000 + 2).toISOString().slice(0, 23)}+02:00`)).status).toBe(
      200,
    );
  });

  it.each([
    '2026-13-01T00:00:00Z',
    '2026-02-30T00:00:00Z',
    '2026-01-01T00:00:00.1234567Z',
    '2026-01-01 00:00:00Z',
    '2026-01-01T00:00:00',
    '2026-01-01T24:00:00Z',
    '2026-01-01T00:00:00+24:00',
  ])('a malformed instant (%s) is a validation_error from both operations', async (asOf) => {
    for (const kind of ['workspace', 'solution'] as const) {
      const response = await read(kind, asOf);
      expectError(response, 400, 'validation_error');
      expect(response.body.error.details[0].path).toBe('params.as_of');
    }
  });
});
