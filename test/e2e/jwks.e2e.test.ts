import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callApi, startTestService, testSecret, type TestService } from '../support/service.js';

/** Tokens verified with a JWKS (contract §3): RS256, ES256 and EdDSA accepted, HS256 and unknown keys not. */
describe('JWKS mode', () => {
  let jwksServer: Server;
  let service: TestService;
  const keys: Record<'RS256' | 'ES256' | 'EdDSA', { privateKey: CryptoKey; kid: string }> = {} as never;

  beforeAll(async () => {
    const published: JWK[] = [];
    for (const alg of ['RS256', 'ES256', 'EdDSA'] as const) {
      const pair = await generateKeyPair(alg, alg === 'EdDSA' ? { crv: 'Ed25519' } : undefined);
      const kid = `key-${alg}`;
      keys[alg] = { privateKey: pair.privateKey, kid };
      published.push({ ...(await exportJWK(pair.publicKey)), kid, alg });
    }
    jwksServer = createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ keys: published }));
    });
    await new Promise<void>((resolve) => jwksServer.listen(0, '127.0.0.1', resolve));
    const { port } = jwksServer.address() as AddressInfo;
    service = await startTestService({ env: { AUTH_JWT_SECRET: '', AUTH_JWKS_URL: `http://127.0.0.1:${port}/jwks.json` } });
  });
  afterAll(async () => {
    await service?.close();
    jwksServer?.close();
  });

  const sign = (alg: keyof typeof keys, key = keys[alg].privateKey, kid = keys[alg].kid) =>
    new SignJWT({ orgs: ['org_jwks'], scope: 'workspaces:read workspaces:write' })
      .setProtectedHeader({ alg, kid })
      .setSubject('jwks-user')
      .setExpirationTime('5m')
      .sign(key);

  it.each(['RS256', 'ES256', 'EdDSA'] as const)('accepts a %s token signed by a published key', async (alg) => {
    const token = await sign(alg);
    const created = await callApi(service, token, 'create_workspace', { organization_id: 'org_jwks', name: alg });
    expect(created.status).toBe(200);
    expect(created.body.data.name).toBe(alg);
  });

  it('rejects HS256 tokens, even signed with a secret the service would know in the other mode', async () => {
    const token = await new SignJWT({ orgs: ['org_jwks'], scope: 'workspaces:read' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('x')
      .setExpirationTime('5m')
      .sign(new TextEncoder().encode(testSecret));
    const answer = await callApi(service, token, 'list_workspaces', { page: 1, size: 1 });
    expect(answer.status).toBe(401);
    expect(answer.headers.get('www-authenticate')).toBe('Bearer');
  });

  it('rejects a token signed by a key the JWKS does not publish', async () => {
    const stranger = await generateKeyPair('ES256');
    const answer = await callApi(service, await sign('ES256', stranger.privateKey), 'list_workspaces', { page: 1, size: 1 });
    expect(answer.status).toBe(401);
    expect(answer.body.error.code).toBe('unauthenticated');
  });
});

describe('JWKS that cannot be fetched', () => {
  let failingServer: Server;
  let service: TestService;

  beforeAll(async () => {
    failingServer = createServer((_request, response) => {
      response.writeHead(503);
      response.end('down');
    });
    await new Promise<void>((resolve) => failingServer.listen(0, '127.0.0.1', resolve));
    const { port } = failingServer.address() as AddressInfo;
    service = await startTestService({ env: { AUTH_JWT_SECRET: '', AUTH_JWKS_URL: `http://127.0.0.1:${port}/jwks.json` } });
  });
  afterAll(async () => {
    await service?.close();
    failingServer?.close();
  });

  it('answers 503 unavailable: the key set is the service’s problem, not the caller’s', async () => {
    const { privateKey } = await generateKeyPair('RS256');
    const token = await new SignJWT({ orgs: [], scope: 'workspaces:read' })
      .setProtectedHeader({ alg: 'RS256', kid: 'any' })
      .setSubject('x')
      .setExpirationTime('5m')
      .sign(privateKey);
    const answer = await callApi(service, token, 'list_workspaces', { page: 1, size: 1 });
    expect(answer.status).toBe(503);
    expect(answer.body.error.code).toBe('unavailable');
  });
});
