import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { expectError, expectOk, jsonHeaders, rawPost } from './helpers.js';

/** Sends bytes as they are, for requests no HTTP client would produce, and reads the answer until the socket closes. */
async function rawHttp(service: TestService, request: string | Buffer) {
  const { port } = new URL(service.url);
  const received = await new Promise<Buffer>((resolve, reject) => {
    const socket = net.connect(Number(port), '127.0.0.1', () => socket.end(request));
    const chunks: Buffer[] = [];
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('close', () => resolve(Buffer.concat(chunks)));
    socket.on('error', reject);
  });
  const text = received.toString('utf8');
  const [head = '', body = ''] = text.split('\r\n\r\n');
  const [statusLine = '', ...headerLines] = head.split('\r\n');
  const headers = new Headers(headerLines.map((line) => line.split(/:\s*/, 2) as [string, string]));
  return { status: Number(statusLine.split(' ')[1]), headers, body: body ? JSON.parse(body) : undefined, text };
}

describe('requests the HTTP layer answers before the app (contract §1)', () => {
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService();
  });
  afterAll(() => service?.close());

  it.each(['POST /%zz', 'POST /api%zz', 'GET /%zz', 'DELETE /api/%E0%A4%A'])('%s: 400 bad_request with a request id, nothing naming the framework', async (line) => {
    const response = await rawHttp(service, `${line} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
    expectError(response, 400, 'bad_request');
    expect(response.text).not.toMatch(/FST_|fastify/i);
  });

  it('headers over the size limit: 431 with the contract body and a request id', async () => {
    const response = await rawHttp(service, `GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    expectError(response, 431, 'bad_request');
  });

  it('a malformed request line: 400 with the contract body and a request id', async () => {
    const response = await rawHttp(service, 'THIS IS NOT HTTP\r\n\r\n');
    expectError(response, 400, 'bad_request');
    expect(response.text).not.toMatch(/Client Error|statusCode/);
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
  ])('the number %s, which a double cannot hold, is a validation_error naming %s, and nothing is stored', async (number, path) => {
    const before = await total();
    const body = `{"query":"create_workspace","params":{"organization_id":"${org}","name":"n","attributes":{"big":${number}}}}`;
    const response = await rawPost(service, body, jsonHeaders(token));
    expectError(response, 400, 'validation_error');
    expect(response.body.error.details).toEqual([{ path, message: expect.stringContaining('exactly') }]);
    expect(await total()).toBe(before);
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
