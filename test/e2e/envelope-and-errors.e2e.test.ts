import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService, type TestService } from '../support/service.js';
import { expectError, expectOk, expectValidation, jsonHeaders, ok, rawPost } from './helpers.js';

/** Contract §1 (envelope) and §2 (errors, order of checks). */
describe('envelope and errors', () => {
  let service: TestService;
  let token: string;
  let noScopeToken: string;
  let workspaceId: string;
  let foreignWorkspaceId: string;

  beforeAll(async () => {
    service = await startTestService();
    token = await service.token(['org_env']);
    noScopeToken = await service.token(['org_env'], '');
    workspaceId = (await ok(service, token, 'create_workspace', { organization_id: 'org_env', name: 'Envelope' })).id;
    const foreignToken = await service.token(['org_elsewhere']);
    foreignWorkspaceId = (await ok(service, foreignToken, 'create_workspace', { organization_id: 'org_elsewhere', name: 'Foreign' })).id;
  });
  afterAll(() => service?.close());

  describe('success envelope', () => {
    it('answers every operation kind with HTTP 200 and a body holding only "data"', async () => {
      const created = await callApi(service, token, 'create_workspace', { organization_id: 'org_env', name: 'Ok' });
      const workspace = expectOk(created);
      expect(created.headers.get('content-type')).toMatch(/^application\/json/);
      expectOk(await callApi(service, token, 'get_workspace', { id: workspace.id }));
      expectOk(await callApi(service, token, 'list_workspaces', { page: 1, size: 1 }));
      expectOk(await callApi(service, token, 'update_workspace', { id: workspace.id, name: 'Ok 2' }));
      const deleted = await callApi(service, token, 'delete_workspace', { id: workspace.id });
      expect(deleted.status).toBe(200);
      expect(deleted.body).toEqual({ data: { id: workspace.id } });
    });

    it('accepts a charset parameter and any letter case in the JSON content type', async () => {
      const body = JSON.stringify({ query: 'list_workspaces', params: { page: 1, size: 1 } });
      for (const contentType of ['application/json; charset=utf-8', 'application/json;charset=UTF-8', 'Application/JSON']) {
        const response = await rawPost(service, body, { authorization: `Bearer ${token}`, 'content-type': contentType });
        expect(response.status, contentType).toBe(200);
        expect(response.body.data.page).toBe(1);
      }
    });
  });

  describe('bad_request', () => {
    const cases: [string, string][] = [
      ['invalid JSON', '{"query": "list_workspaces", "params": {'],
      ['trailing garbage', '{"query":"list_workspaces","params":{"page":1,"size":1}} x'],
      ['a bare word', 'hello'],
      ['an array', '[{"query":"list_workspaces","params":{"page":1,"size":1}}]'],
      ['a string', '"list_workspaces"'],
      ['a number', '42'],
      ['null', 'null'],
      ['an empty object', '{}'],
      ['query missing', '{"params":{"page":1,"size":1}}'],
      ['query a number', '{"query":1,"params":{}}'],
      ['query null', '{"query":null,"params":{}}'],
      ['query an array', '{"query":["list_workspaces"],"params":{"page":1,"size":1}}'],
      ['params missing', '{"query":"list_workspaces"}'],
      ['params null', '{"query":"list_workspaces","params":null}'],
      ['params an array', '{"query":"list_workspaces","params":[1,1]}'],
      ['params a string', '{"query":"list_workspaces","params":"page=1"}'],
      ['params a number', '{"query":"list_workspaces","params":1}'],
      ['an unknown top-level field', '{"query":"list_workspaces","params":{"page":1,"size":1},"extra":true}'],
      ['a "__proto__" top-level field', '{"query":"list_workspaces","params":{"page":1,"size":1},"__proto__":{"admin":true}}'],
      ['a "constructor" top-level field', '{"query":"list_workspaces","params":{"page":1,"size":1},"constructor":{}}'],
      ['a "data" top-level field', '{"query":"list_workspaces","params":{"page":1,"size":1},"data":{}}'],
      // RFC 7493 §2.3: which of the two a proxy, a log or another parser takes is anyone's guess.
      ['"query" twice', '{"query":"delete_workspace","query":"list_workspaces","params":{"page":1,"size":1}}'],
      ['a parameter twice', '{"query":"list_workspaces","params":{"page":1,"size":1,"page":2}}'],
    ];
    it.each(cases)('answers 400 bad_request for %s', async (_what, body) => {
      expectError(await rawPost(service, body, jsonHeaders(token)), 400, 'bad_request');
    });

    it('answers 400 bad_request for an attribute named twice (once escaped), and stores nothing', async () => {
      const body = '{"query":"update_workspace","params":{"id":"ID","attributes":{"owner":"a","\\u006fwner":"b"}}}'.replace(
        'ID',
        workspaceId,
      );
      const refused = await rawPost(service, body, jsonHeaders(token));
      expectError(refused, 400, 'bad_request');
      expect(refused.body.error.message).toBe('the body names the member "owner" twice in params.attributes: each member may appear once');
      const history = await ok(service, token, 'get_workspace_history', { id: workspaceId, page: 1, size: 10 });
      expect(history.items.map((item: { type: string }) => item.type)).toEqual(['WorkspaceCreated']);
    });

    it('answers 400 bad_request for an empty body', async () => {
      expectError(await rawPost(service, '', jsonHeaders(token)), 400, 'bad_request');
    });
  });

  describe('unknown_operation', () => {
    const names = [
      'no_such_thing',
      '',
      'GET_WORKSPACE',
      'get_workspace ',
      'get_workspaces',
      'get_workspace_history_x',
      '__proto__',
      'constructor',
      'toString',
      'hasOwnProperty',
      'valueOf',
    ];
    it.each(names)('answers 400 unknown_operation for %j', async (query) => {
      expectError(await callApi(service, token, query, {}), 400, 'unknown_operation');
    });

    it('answers 400 unknown_operation for a query that is a lone surrogate', async () => {
      expectError(await rawPost(service, '{"query":"\\ud800","params":{}}', jsonHeaders(token)), 400, 'unknown_operation');
    });
  });

  describe('order of checks: 401, 400 bad_request/unknown_operation, 403 scope, 400 validation, 403/404', () => {
    it('answers 401 before looking at the body, whatever the body', async () => {
      const bodies: [string, Record<string, string>][] = [
        ['{not json', jsonHeaders()],
        ['{"query":"nope","params":{}}', jsonHeaders()],
        ['{"query":"get_workspace","params":{"id":"bad id"}}', jsonHeaders()],
        ['{"query":"get_workspace","query":"list_workspaces","params":{"page":1,"size":1}}', jsonHeaders()],
        ['{"query":"list_workspaces","params":{"page":1,"size":1}}', { 'content-type': 'text/plain' }],
        ['', {}],
        [' '.repeat(2 * 1024 * 1024), jsonHeaders()],
      ];
      for (const [body, headers] of bodies) {
        expectError(await rawPost(service, body, headers), 401, 'unauthenticated');
        expectError(await rawPost(service, body, { ...headers, authorization: 'Bearer not.a.token' }), 401, 'unauthenticated');
      }
    });

    it('answers bad_request and unknown_operation before checking scopes', async () => {
      expectError(await rawPost(service, '{"query":', jsonHeaders(noScopeToken)), 400, 'bad_request');
      expectError(await rawPost(service, '{"query":"get_workspace","params":[]}', jsonHeaders(noScopeToken)), 400, 'bad_request');
      const repeated = '{"query":"get_workspace","params":{"id":"ws_a","id":"ws_b"}}';
      expectError(await rawPost(service, repeated, jsonHeaders(noScopeToken)), 400, 'bad_request');
      expectError(await callApi(service, noScopeToken, 'nope', {}), 400, 'unknown_operation');
    });

    it('answers 403 for a missing scope before validating the parameters', async () => {
      expectError(await callApi(service, noScopeToken, 'get_workspace', { id: 'not an id' }), 403, 'forbidden');
      expectError(await callApi(service, noScopeToken, 'create_solution', { nonsense: true }), 403, 'forbidden');
      const readOnly = await service.token(['org_env'], 'workspaces:read solutions:read');
      expectError(await callApi(service, readOnly, 'update_workspace', { id: 42 }), 403, 'forbidden');
    });

    it('answers 400 validation_error before access and existence checks', async () => {
      // A foreign workspace with an invalid extra parameter: validation wins over 404.
      expectValidation(await callApi(service, token, 'update_workspace', { id: foreignWorkspaceId, name: '' }), 'params.name');
      expectValidation(await callApi(service, token, 'get_workspace', { id: foreignWorkspaceId, extra: 1 }), 'params.extra');
      // A foreign organization with an invalid name: validation wins over 403.
      expectValidation(await callApi(service, token, 'create_workspace', { organization_id: 'org_elsewhere', name: '' }), 'params.name');
    });

    it('answers 403/404 for access and existence once everything else is valid', async () => {
      expectError(await callApi(service, token, 'get_workspace', { id: foreignWorkspaceId }), 404, 'not_found');
      expectError(await callApi(service, token, 'update_workspace', { id: foreignWorkspaceId, name: 'x' }), 404, 'not_found');
      expectError(await callApi(service, token, 'create_workspace', { organization_id: 'org_elsewhere', name: 'x' }), 403, 'forbidden');
      expectOk(await callApi(service, token, 'get_workspace', { id: workspaceId }));
    });
  });

  describe('unknown paths and methods', () => {
    const targets: [string, string][] = [
      ['GET', '/'],
      ['GET', '/api'],
      ['PUT', '/api'],
      ['DELETE', '/api'],
      ['PATCH', '/api'],
      ['OPTIONS', '/api'],
      ['POST', '/'],
      ['POST', '/api/'],
      ['POST', '/API'],
      ['POST', '/api/v2'],
      ['POST', '/graphql'],
      ['GET', '/nope'],
      ['POST', '/healthz'],
      ['DELETE', '/readyz'],
      ['GET', '/api/../etc/passwd'],
    ];
    it.each(targets)('answers %s %s with 404 not_found, with or without a token', async (method, path) => {
      const body =
        method === 'GET' || method === 'OPTIONS' ? undefined : JSON.stringify({ query: 'list_workspaces', params: { page: 1, size: 1 } });
      for (const headers of [{}, jsonHeaders(), jsonHeaders(token), jsonHeaders('garbage')]) {
        expectError(await rawPost(service, body, headers, path, method), 404, 'not_found');
      }
    });

    it.each([
      ['invalid JSON', '{oops', 'application/json'],
      ['an empty JSON body', '', 'application/json'],
      ['a text body', 'hello', 'text/plain'],
      ['a body over the size limit', ' '.repeat(1024 * 1024 + 10), 'application/json'],
    ])('answers an unknown path with 404 whatever the body: %s', async (_what, body, contentType) => {
      for (const [method, path] of [
        ['POST', '/nope'],
        ['PUT', '/api'],
        ['PATCH', '/api/x'],
        ['DELETE', '/api'],
      ] as const) {
        for (const auth of [{}, { authorization: `Bearer ${token}` }] as Record<string, string>[]) {
          expectError(await rawPost(service, body, { ...auth, 'content-type': contentType }, path, method), 404, 'not_found');
        }
      }
    });

    it('answers HEAD /api with 404 and no body', async () => {
      const response = await rawPost(service, undefined, jsonHeaders(token), '/api', 'HEAD');
      expect(response.status).toBe(404);
      expect(response.text).toBe('');
    });
  });

  describe('413 payload_too_large', () => {
    const validBody = JSON.stringify({ query: 'list_workspaces', params: { page: 1, size: 1 } });
    const padTo = (bytes: number) => validBody + ' '.repeat(bytes - validBody.length);

    it('accepts a body of exactly 1 MiB (the default limit)', async () => {
      const response = await rawPost(service, padTo(1024 * 1024), jsonHeaders(token));
      expectOk(response);
    });

    it('answers 413 for a body one byte over 1 MiB', async () => {
      expectError(await rawPost(service, padTo(1024 * 1024 + 1), jsonHeaders(token)), 413, 'payload_too_large');
    });

    it('answers 413 for a much larger body', async () => {
      const big = JSON.stringify({
        query: 'create_workspace',
        params: { organization_id: 'org_env', name: 'x', attributes: { blob: 'x'.repeat(3 * 1024 * 1024) } },
      });
      expectError(await rawPost(service, big, jsonHeaders(token)), 413, 'payload_too_large');
    });
  });

  describe('415 unsupported_media_type', () => {
    const body = JSON.stringify({ query: 'list_workspaces', params: { page: 1, size: 1 } });
    const types = [
      'text/plain',
      'text/json',
      'text/html',
      'application/x-www-form-urlencoded',
      'multipart/form-data; boundary=x',
      'application/xml',
      'application/jsonp',
      'application/octet-stream',
    ];
    it.each(types)('answers 415 for content type %s', async (contentType) => {
      expectError(
        await rawPost(service, body, { authorization: `Bearer ${token}`, 'content-type': contentType }),
        415,
        'unsupported_media_type',
      );
    });

    it('answers 415 when the content type is missing', async () => {
      expectError(await rawPost(service, body, { authorization: `Bearer ${token}` }), 415, 'unsupported_media_type');
      expectError(
        await rawPost(service, new TextEncoder().encode(body), { authorization: `Bearer ${token}` }),
        415,
        'unsupported_media_type',
      );
    });
  });

  describe('x-request-id', () => {
    const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

    it('echoes a valid incoming id on success, on errors and on unknown paths', async () => {
      const success = await callApi(service, token, 'list_workspaces', { page: 1, size: 1 }, { 'x-request-id': 'client-req-001' });
      expect(success.status).toBe(200);
      expect(success.headers.get('x-request-id')).toBe('client-req-001');

      const invalid = await callApi(service, token, 'get_workspace', { id: 'x' }, { 'x-request-id': 'client.req:002' });
      expectError(invalid, 400, 'validation_error');
      expect(invalid.body.error.request_id).toBe('client.req:002');

      const unauthenticated = await callApi(
        service,
        undefined,
        'list_workspaces',
        { page: 1, size: 1 },
        { 'x-request-id': 'client_req_003' },
      );
      expectError(unauthenticated, 401, 'unauthenticated');
      expect(unauthenticated.body.error.request_id).toBe('client_req_003');

      const missing = await rawPost(service, undefined, { 'x-request-id': 'client-req-004' }, '/missing', 'GET');
      expectError(missing, 404, 'not_found');
      expect(missing.body.error.request_id).toBe('client-req-004');

      const health = await fetch(`${service.url}/healthz`, { headers: { 'x-request-id': 'client-req-005' } });
      expect(health.headers.get('x-request-id')).toBe('client-req-005');
    });

    it('generates an id when none is sent, a different one per request', async () => {
      const first = await callApi(service, token, 'list_workspaces', { page: 1, size: 1 });
      const second = await callApi(service, token, 'list_workspaces', { page: 1, size: 1 });
      expect(first.headers.get('x-request-id')).toMatch(uuid);
      expect(second.headers.get('x-request-id')).toMatch(uuid);
      expect(first.headers.get('x-request-id')).not.toBe(second.headers.get('x-request-id'));
      const failed = await callApi(service, token, 'nope', {});
      expectError(failed, 400, 'unknown_operation');
      expect(failed.body.error.request_id).toMatch(uuid);
    });

    it.each([
      ['too long', 'a'.repeat(129)],
      ['with spaces', 'has spaces in it'],
      ['with a slash', 'a/b'],
      ['with markup', '<script>alert(1)</script>'],
      ['with quotes', '"quoted"'],
      ['empty', ''],
    ])('replaces an invalid incoming id (%s) with a generated one', async (_what, incoming) => {
      const response = await callApi(service, token, 'get_workspace', { id: 'bad' }, { 'x-request-id': incoming });
      expectError(response, 400, 'validation_error');
      expect(response.headers.get('x-request-id')).toMatch(uuid);
      expect(response.body.error.request_id).toBe(response.headers.get('x-request-id'));
    });

    it('accepts a 128-character id as valid', async () => {
      const incoming = 'r'.repeat(128);
      const response = await callApi(service, token, 'list_workspaces', { page: 1, size: 1 }, { 'x-request-id': incoming });
      expect(response.headers.get('x-request-id')).toBe(incoming);
    });
  });

  describe('no internals in error bodies', () => {
    it('keeps error bodies to code, message, request_id and details for a spread of failures', async () => {
      const failures = [
        await rawPost(
          service,
          '{"query":"create_workspace","params":{"organization_id":"org_env","name":"x","attributes":' +
            '{"a":'.repeat(20000) +
            '1' +
            '}'.repeat(20000) +
            '}}',
          jsonHeaders(token),
        ),
        await rawPost(
          service,
          '{"query":"create_workspace","params":{"organization_id":"org_env","name":"a\\u0000b"}}',
          jsonHeaders(token),
        ),
        await rawPost(
          service,
          '{"query":"create_workspace","params":{"organization_id":"org_env","name":"x","attributes":{"k\\u0000":1}}}',
          jsonHeaders(token),
        ),
        await rawPost(
          service,
          '{"query":"create_workspace","params":{"organization_id":"org_env","name":"x","description":"\\udc00"}}',
          jsonHeaders(token),
        ),
        await callApi(service, token, 'get_workspace', { id: `ws_${'x'.repeat(64)}` }),
        await callApi(service, token, 'list_workspaces', { page: Number.MAX_SAFE_INTEGER + 1, size: 1 }),
        await callApi(service, token, 'list_workspaces', { page: 1e308, size: 1 }),
      ];
      const statuses = failures.map((failure) => failure.status);
      expect(statuses).toEqual([400, 400, 400, 400, 404, 400, 400]);
      for (const failure of failures) expectError(failure, failure.status, failure.body.error.code);
    });
  });

  describe('rate limiting', () => {
    it('is off by default: many quick requests from one caller are all answered', async () => {
      const responses = await Promise.all(
        Array.from({ length: 120 }, () => callApi(service, token, 'list_workspaces', { page: 1, size: 1 })),
      );
      expect(responses.map((response) => response.status)).toEqual(responses.map(() => 200));
    });
  });
});
