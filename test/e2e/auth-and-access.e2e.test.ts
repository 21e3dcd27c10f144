import { request as httpRequest } from 'node:http';
import { exportJWK, generateKeyPair, SignJWT, type JWTPayload } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService, testSecret, type TestService } from '../support/service.js';
import { allScopes, expectError, expectOk, ok } from './helpers.js';

/** Contract §3: tokens, scopes, and access by organization. */
const issuer = 'https://issuer.example.test';
const audience = 'workspace-api';
const secretKey = new TextEncoder().encode(testSecret);
const now = () => Math.floor(Date.now() / 1000);

type TokenOptions = {
  payload?: JWTPayload & Record<string, unknown>;
  omit?: string[];
  alg?: string;
  key?: Parameters<SignJWT['sign']>[0];
};

/** A token as the service expects it (HS256, iss, aud, exp, sub, orgs, scope), with any part changed or left out. */
async function sign(options: TokenOptions = {}): Promise<string> {
  const payload: Record<string, unknown> = {
    sub: 'user-1',
    orgs: ['org_alpha'],
    scope: allScopes,
    iss: issuer,
    aud: audience,
    iat: now(),
    exp: now() + 600,
    ...options.payload,
  };
  for (const claim of options.omit ?? []) delete payload[claim];
  return new SignJWT(payload).setProtectedHeader({ alg: options.alg ?? 'HS256', typ: 'JWT' }).sign(options.key ?? secretKey);
}

const base64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

describe('authentication and access', () => {
  let service: TestService;
  let alpha: string; // org_alpha, all scopes
  let beta: string; // org_beta, all scopes
  let alphaWorkspace: any;
  let alphaSolution: any;
  let betaWorkspace: any;

  const tokenFor = (orgs: string[], scope = allScopes, sub = 'user-1') => sign({ payload: { orgs, scope, sub } });

  beforeAll(async () => {
    service = await startTestService({ env: { AUTH_ISSUER: issuer, AUTH_AUDIENCE: audience } });
    alpha = await tokenFor(['org_alpha'], allScopes, 'alice');
    beta = await tokenFor(['org_beta'], allScopes, 'bob');
    alphaWorkspace = await ok(service, alpha, 'create_workspace', { organization_id: 'org_alpha', name: 'Alpha WS', attributes: { k: 1 } });
    alphaSolution = await ok(service, alpha, 'create_solution', { workspace_id: alphaWorkspace.id, name: 'Alpha Sol' });
    betaWorkspace = await ok(service, beta, 'create_workspace', { organization_id: 'org_beta', name: 'Beta WS' });
    await ok(service, beta, 'create_solution', { workspace_id: betaWorkspace.id, name: 'Beta Sol' });
  });
  afterAll(() => service?.close());

  describe('tokens', () => {
    it('accepts a well-formed token', async () => {
      expectOk(await callApi(service, await sign(), 'list_workspaces', { page: 1, size: 1 }));
    });

    it('accepts a token that expired within the 30 s clock tolerance', async () => {
      expectOk(await callApi(service, await sign({ payload: { exp: now() - 10 } }), 'list_workspaces', { page: 1, size: 1 }));
    });

    it('accepts a token issued within the 30 s clock tolerance ahead of the service', async () => {
      expectOk(await callApi(service, await sign({ payload: { iat: now() + 10 } }), 'list_workspaces', { page: 1, size: 1 }));
    });

    const badTokens: [string, () => Promise<string | undefined>][] = [
      ['no token', async () => undefined],
      ['a non-JWT string', async () => 'not-a-jwt'],
      ['three garbage segments', async () => 'abc.def.ghi'],
      ['a token signed with another secret', () => sign({ key: new TextEncoder().encode('another-secret-another-secret-another!!') })],
      [
        'a token whose payload was altered after signing',
        async () => {
          const [header, , signature] = (await sign()).split('.');
          return `${header}.${base64url({ sub: 'user-1', orgs: ['org_alpha', 'org_beta'], scope: allScopes, iss: issuer, aud: audience, exp: now() + 600 })}.${signature}`;
        },
      ],
      ['a token with its signature cut off', async () => (await sign()).split('.').slice(0, 2).join('.') + '.'],
      ['an expired token', () => sign({ payload: { exp: now() - 300 } })],
      ['a token expired just beyond the tolerance', () => sign({ payload: { exp: now() - 45 } })],
      ['a token without exp', () => sign({ omit: ['exp'] })],
      ['a token with exp as a string', () => sign({ payload: { exp: String(now() + 600) } as never })],
      ['a token not valid yet (nbf)', () => sign({ payload: { nbf: now() + 300 } })],
      ['a token issued in the future beyond the tolerance (iat)', () => sign({ payload: { iat: now() + 300 } })],
      ['a token with iat as a string', () => sign({ payload: { iat: String(now()) } as never })],
      [
        'an unsigned token (alg none)',
        async () =>
          `${base64url({ alg: 'none', typ: 'JWT' })}.${base64url({ sub: 'user-1', orgs: ['org_alpha'], scope: allScopes, iss: issuer, aud: audience, exp: now() + 600 })}.`,
      ],
      ['an HS384 token with the right secret', () => sign({ alg: 'HS384' })],
      ['an HS512 token with the right secret', () => sign({ alg: 'HS512' })],
      [
        'an RS256 token',
        async () => {
          const { privateKey } = await generateKeyPair('RS256');
          return sign({ alg: 'RS256', key: privateKey });
        },
      ],
      [
        'an ES256 token',
        async () => {
          const { privateKey } = await generateKeyPair('ES256');
          return sign({ alg: 'ES256', key: privateKey });
        },
      ],
      ['a wrong issuer', () => sign({ payload: { iss: 'https://evil.example.test' } })],
      ['no issuer', () => sign({ omit: ['iss'] })],
      ['a wrong audience', () => sign({ payload: { aud: 'another-api' } })],
      ['no audience', () => sign({ omit: ['aud'] })],
      ['no sub', () => sign({ omit: ['sub'] })],
      ['an empty sub', () => sign({ payload: { sub: '' } })],
      ['a sub with a NUL character (it could not be recorded as an actor)', () => sign({ payload: { sub: 'user\u0000one' } })],
      ['a sub with a lone surrogate', () => sign({ payload: { sub: 'user\ud800' } })],
      ['no orgs', () => sign({ omit: ['orgs'] })],
      ['orgs as a string', () => sign({ payload: { orgs: 'org_alpha' } })],
      ['orgs null', () => sign({ payload: { orgs: null } })],
      ['orgs holding a malformed organization id', () => sign({ payload: { orgs: ['alpha'] } })],
    ];

    // Node keeps the first of repeated Authorization lines; a proxy in front may check the last.
    it.each([
      ['two tokens of different callers', () => [alpha, beta], ['authorization', 'authorization']],
      ['the same token twice, the name in two letter cases', () => [alpha, alpha], ['Authorization', 'AUTHORIZATION']],
    ])('answers 401 to an Authorization header sent twice: %s', async (_what, tokens, names) => {
      const answer = await new Promise<{ status: number; body: any; authenticate: unknown }>((resolve, reject) => {
        const body = JSON.stringify({ query: 'get_workspace', params: { id: alphaWorkspace.id } });
        const request = httpRequest(`${service.url}/api`, {
          method: 'POST',
          // Raw header lines (Node adds no Host to them): an object would join the two values into one line.
          headers: [
            'host',
            new URL(service.url).host,
            'content-type',
            'application/json',
            ...tokens().flatMap((token, line) => [names[line]!, `Bearer ${token}`]),
          ],
        });
        request.on('error', reject);
        request.on('response', (response) => {
          let text = '';
          response.setEncoding('utf8');
          response.on('data', (chunk: string) => (text += chunk));
          response.on('end', () =>
            resolve({ status: response.statusCode!, body: JSON.parse(text), authenticate: response.headers['www-authenticate'] }),
          );
        });
        request.end(body);
      });
      expect(answer.status).toBe(401);
      expect(answer.body.error).toMatchObject({ code: 'unauthenticated', message: 'send one Authorization header, not several' });
      expect(answer.authenticate).toBe('Bearer');
    });

    it.each(badTokens)('answers 401 with WWW-Authenticate: Bearer for %s', async (_what, make) => {
      const token = await make();
      const response = await callApi(service, token, 'list_workspaces', { page: 1, size: 1 });
      expectError(response, 401, 'unauthenticated');
      expect(response.headers.get('www-authenticate')).toBe('Bearer');
      // Nothing about the records leaks, whichever operation is asked for.
      const read = await callApi(service, token, 'get_workspace', { id: alphaWorkspace.id });
      expectError(read, 401, 'unauthenticated');
    });

    it.each([
      ['Basic credentials', 'Basic dXNlcjpwYXNz'],
      ['a bare Bearer', 'Bearer'],
      ['Bearer and a space', 'Bearer '],
      ['a token without the scheme', 'TOKEN'],
      ['two tokens', 'Bearer a.b.c Bearer d.e.f'],
    ])('answers 401 for an Authorization header holding %s', async (_what, header) => {
      const value = header === 'TOKEN' ? await sign() : header;
      const response = await callApi(service, undefined, 'list_workspaces', { page: 1, size: 1 }, { authorization: value });
      expectError(response, 401, 'unauthenticated');
    });

    it('does not accept a JWK public key as an HMAC secret (algorithm confusion)', async () => {
      const { publicKey } = await generateKeyPair('RS256', { extractable: true });
      const jwk = await exportJWK(publicKey);
      const token = await sign({ alg: 'HS256', key: new TextEncoder().encode(JSON.stringify(jwk)) });
      expectError(await callApi(service, token, 'list_workspaces', { page: 1, size: 1 }), 401, 'unauthenticated');
    });
  });

  describe('scopes', () => {
    const scopeOf: Record<string, string> = {
      get_workspace: 'workspaces:read',
      list_workspaces: 'workspaces:read',
      create_workspace: 'workspaces:write',
      update_workspace: 'workspaces:write',
      delete_workspace: 'workspaces:write',
      get_solution: 'solutions:read',
      list_solutions: 'solutions:read',
      create_solution: 'solutions:write',
      update_solution: 'solutions:write',
      delete_solution: 'solutions:write',
      get_workspace_history: 'workspaces:read',
      get_solution_history: 'solutions:read',
      get_workspace_provenance: 'workspaces:read',
      get_solution_provenance: 'solutions:read',
      diff_workspace: 'workspaces:read',
      diff_solution: 'solutions:read',
    };

    /** Valid parameters for each operation, on fresh records where the operation changes them. */
    async function paramsFor(operation: string): Promise<Record<string, unknown>> {
      const workspace = await ok(service, alpha, 'create_workspace', { organization_id: 'org_alpha', name: 'Scoped' });
      const solution = await ok(service, alpha, 'create_solution', { workspace_id: workspace.id, name: 'Scoped' });
      const params: Record<string, Record<string, unknown>> = {
        get_workspace: { id: workspace.id },
        list_workspaces: { page: 1, size: 5 },
        create_workspace: { organization_id: 'org_alpha', name: 'By scope' },
        update_workspace: { id: workspace.id, name: 'Renamed' },
        delete_workspace: { id: workspace.id },
        get_solution: { id: solution.id },
        list_solutions: { page: 1, size: 5 },
        create_solution: { workspace_id: workspace.id, name: 'By scope' },
        update_solution: { id: solution.id, name: 'Renamed' },
        delete_solution: { id: solution.id },
        get_workspace_history: { id: workspace.id, page: 1, size: 10 },
        get_solution_history: { id: solution.id, page: 1, size: 10 },
        get_workspace_provenance: { id: workspace.id },
        get_solution_provenance: { id: solution.id },
        diff_workspace: { id: workspace.id, from: '2000-01-01T00:00:00Z' },
        diff_solution: { id: solution.id, from: '2000-01-01T00:00:00Z' },
      };
      return params[operation]!;
    }

    it.each(Object.entries(scopeOf))('%s needs %s: 403 without it, 200 with only it', async (operation, scope) => {
      const params = await paramsFor(operation);
      const allButThis = allScopes
        .split(' ')
        .filter((s) => s !== scope)
        .join(' ');
      const withoutScope = await callApi(service, await tokenFor(['org_alpha'], allButThis), operation, params);
      expectError(withoutScope, 403, 'forbidden');
      const onlyThis = await callApi(service, await tokenFor(['org_alpha'], scope), operation, params);
      expectOk(onlyThis);
    });

    it('grants nothing to a token without a scope claim (403, not 401)', async () => {
      const token = await sign({ omit: ['scope'] });
      expectError(await callApi(service, token, 'get_workspace', { id: alphaWorkspace.id }), 403, 'forbidden');
      expectError(await callApi(service, token, 'list_solutions', { page: 1, size: 1 }), 403, 'forbidden');
    });

    it('matches scopes as whole space-separated words', async () => {
      const sloppy = await tokenFor(['org_alpha'], '  solutions:read   workspaces:read  ');
      expectOk(await callApi(service, sloppy, 'get_workspace', { id: alphaWorkspace.id }));
      const lookalikes = await tokenFor(
        ['org_alpha'],
        'workspaces:readx workspaces solutions:* WORKSPACES:READ workspaces:read,solutions:read',
      );
      expectError(await callApi(service, lookalikes, 'get_workspace', { id: alphaWorkspace.id }), 403, 'forbidden');
      expectError(await callApi(service, lookalikes, 'get_solution', { id: alphaSolution.id }), 403, 'forbidden');
    });

    it('does not let a write scope imply the read scope', async () => {
      const writeOnly = await tokenFor(['org_alpha'], 'workspaces:write solutions:write');
      expectError(await callApi(service, writeOnly, 'get_workspace', { id: alphaWorkspace.id }), 403, 'forbidden');
      expectError(await callApi(service, writeOnly, 'list_solutions', { page: 1, size: 1 }), 403, 'forbidden');
    });
  });

  describe('access across organizations', () => {
    it('hides a foreign workspace exactly like a missing one (get_workspace)', async () => {
      const foreign = await callApi(service, beta, 'get_workspace', { id: alphaWorkspace.id });
      const missing = await callApi(service, beta, 'get_workspace', { id: 'ws_doesnotexist000000000' });
      expectError(foreign, 404, 'not_found');
      expectError(missing, 404, 'not_found');
      expect(foreign.body.error.message).toBe(missing.body.error.message);
    });

    it('update_workspace of a foreign workspace is 404 and changes nothing', async () => {
      const response = await callApi(service, beta, 'update_workspace', {
        id: alphaWorkspace.id,
        name: 'Hijacked',
        attributes: { k: null, x: 1 },
      });
      expectError(response, 404, 'not_found');
      expect(await ok(service, alpha, 'get_workspace', { id: alphaWorkspace.id })).toEqual(alphaWorkspace);
    });

    it('delete_workspace of a foreign workspace is 404 and deletes nothing', async () => {
      expectError(await callApi(service, beta, 'delete_workspace', { id: alphaWorkspace.id }), 404, 'not_found');
      expect(await ok(service, alpha, 'get_workspace', { id: alphaWorkspace.id })).toEqual(alphaWorkspace);
      expect(await ok(service, alpha, 'get_solution', { id: alphaSolution.id })).toEqual(alphaSolution);
    });

    it('get_solution of a foreign solution is 404, like a missing one', async () => {
      const foreign = await callApi(service, beta, 'get_solution', { id: alphaSolution.id });
      const missing = await callApi(service, beta, 'get_solution', { id: 'sol_doesnotexist00000000' });
      expectError(foreign, 404, 'not_found');
      expect(foreign.body.error.message).toBe(missing.body.error.message);
    });

    it('update_solution of a foreign solution is 404 and changes nothing', async () => {
      const response = await callApi(service, beta, 'update_solution', {
        id: alphaSolution.id,
        name: 'Hijacked',
        documentation: { blocks: [{ type: 'text', content: 'pwned' }] },
      });
      expectError(response, 404, 'not_found');
      expect(await ok(service, alpha, 'get_solution', { id: alphaSolution.id })).toEqual(alphaSolution);
    });

    it('delete_solution of a foreign solution is 404 and deletes nothing', async () => {
      expectError(await callApi(service, beta, 'delete_solution', { id: alphaSolution.id }), 404, 'not_found');
      expect(await ok(service, alpha, 'get_solution', { id: alphaSolution.id })).toEqual(alphaSolution);
    });

    it('create_solution in a foreign workspace is 404 and creates nothing', async () => {
      const before = await ok(service, alpha, 'list_solutions', { page: 1, size: 100, workspace_id: alphaWorkspace.id });
      expectError(await callApi(service, beta, 'create_solution', { workspace_id: alphaWorkspace.id, name: 'Intruder' }), 404, 'not_found');
      expectError(
        await callApi(service, beta, 'create_solution', {
          workspace_id: alphaWorkspace.id,
          organization_id: 'org_alpha',
          name: 'Intruder',
        }),
        404,
        'not_found',
      );
      const after = await ok(service, alpha, 'list_solutions', { page: 1, size: 100, workspace_id: alphaWorkspace.id });
      expect(after).toEqual(before);
    });

    it('create_workspace in an organization the token does not grant is 403 and creates nothing', async () => {
      const before = await ok(service, alpha, 'list_workspaces', { page: 1, size: 100 });
      const response = await callApi(service, beta, 'create_workspace', { organization_id: 'org_alpha', name: 'Intruder' });
      expectError(response, 403, 'forbidden');
      expectError(await callApi(service, beta, 'create_workspace', { organization_id: 'org_unknown', name: 'Nowhere' }), 403, 'forbidden');
      expect(await ok(service, alpha, 'list_workspaces', { page: 1, size: 100 })).toEqual(before);
    });

    it('list_workspaces shows and counts only accessible workspaces', async () => {
      const alphaList = await ok(service, alpha, 'list_workspaces', { page: 1, size: 100 });
      const betaList = await ok(service, beta, 'list_workspaces', { page: 1, size: 100 });
      expect(alphaList.items.every((w: any) => w.organization_id === 'org_alpha')).toBe(true);
      expect(betaList.items.every((w: any) => w.organization_id === 'org_beta')).toBe(true);
      expect(alphaList.total).toBe(alphaList.items.length);
      expect(betaList.total).toBe(1);
      expect(betaList.items.map((w: any) => w.id)).toEqual([betaWorkspace.id]);
    });

    it('list_solutions shows and counts only accessible solutions', async () => {
      const betaList = await ok(service, beta, 'list_solutions', { page: 1, size: 100 });
      expect(betaList.total).toBe(1);
      expect(betaList.items.map((s: any) => s.workspace_id)).toEqual([betaWorkspace.id]);
      const alphaList = await ok(service, alpha, 'list_solutions', { page: 1, size: 100 });
      expect(alphaList.items.every((s: any) => s.organization_id === 'org_alpha')).toBe(true);
      expect(alphaList.total).toBe(alphaList.items.length);
    });

    it('filters naming an inaccessible organization or workspace give an empty page with total 0', async () => {
      const empty = (page: number, size: number) => ({ total: 0, page, size, items: [] });
      expect(await ok(service, beta, 'list_workspaces', { page: 1, size: 10, organization_id: 'org_alpha' })).toEqual(empty(1, 10));
      expect(await ok(service, beta, 'list_solutions', { page: 1, size: 10, organization_id: 'org_alpha' })).toEqual(empty(1, 10));
      expect(await ok(service, beta, 'list_solutions', { page: 1, size: 10, workspace_id: alphaWorkspace.id })).toEqual(empty(1, 10));
      expect(
        await ok(service, beta, 'list_solutions', { page: 1, size: 10, workspace_id: alphaWorkspace.id, organization_id: 'org_beta' }),
      ).toEqual(empty(1, 10));
      expect(
        await ok(service, beta, 'list_solutions', { page: 1, size: 10, workspace_id: alphaWorkspace.id, organization_id: 'org_alpha' }),
      ).toEqual(empty(1, 10));
      // The same filters from the owning side do find the records.
      expect((await ok(service, alpha, 'list_solutions', { page: 1, size: 10, workspace_id: alphaWorkspace.id })).total).toBeGreaterThan(0);
    });

    it('a token granting no organization sees nothing and can create nothing', async () => {
      const nobody = await tokenFor([]);
      expect(await ok(service, nobody, 'list_workspaces', { page: 1, size: 10 })).toEqual({ total: 0, page: 1, size: 10, items: [] });
      expect(await ok(service, nobody, 'list_solutions', { page: 1, size: 10 })).toEqual({ total: 0, page: 1, size: 10, items: [] });
      expectError(await callApi(service, nobody, 'get_workspace', { id: alphaWorkspace.id }), 404, 'not_found');
      expectError(await callApi(service, nobody, 'create_workspace', { organization_id: 'org_alpha', name: 'x' }), 403, 'forbidden');
    });

    it('grants access by organization, not by who created the record', async () => {
      const colleague = await tokenFor(['org_alpha'], allScopes, 'carol');
      expect(await ok(service, colleague, 'get_workspace', { id: alphaWorkspace.id })).toEqual(alphaWorkspace);
      const updated = await ok(service, colleague, 'update_solution', { id: alphaSolution.id, name: alphaSolution.name });
      expect(updated.id).toBe(alphaSolution.id);
      alphaSolution = updated;
    });

    it('a token granting several organizations sees and counts all of them', async () => {
      const both = await tokenFor(['org_alpha', 'org_beta']);
      const alphaTotal = (await ok(service, alpha, 'list_workspaces', { page: 1, size: 1 })).total;
      const betaTotal = (await ok(service, beta, 'list_workspaces', { page: 1, size: 1 })).total;
      const list = await ok(service, both, 'list_workspaces', { page: 1, size: 100 });
      expect(list.total).toBe(alphaTotal + betaTotal);
      expect(new Set(list.items.map((w: any) => w.organization_id))).toEqual(new Set(['org_alpha', 'org_beta']));
      const onlyBeta = await ok(service, both, 'list_workspaces', { page: 1, size: 100, organization_id: 'org_beta' });
      expect(onlyBeta.total).toBe(betaTotal);
      expect(onlyBeta.items.every((w: any) => w.organization_id === 'org_beta')).toBe(true);
    });
  });
});
