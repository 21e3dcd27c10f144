import { afterEach, describe, expect, it, vi } from 'vitest';
import { createTokenVerifier } from '../../../src/api/auth.js';
import { mintToken } from '../../../src/api/tokens.js';

/**
 * Verified tokens are remembered for a while (src/api/auth.ts), but a remembered token is never
 * honoured past its `exp` and the 30 s leeway (contract §3: an expired token is refused).
 */
describe('token verification', () => {
  const secret = 'a-test-secret-of-at-least-thirty-two-characters';
  const start = Date.parse('2026-11-26T12:00:00Z');
  afterEach(() => vi.useRealTimers());

  it('given a token verified within its leeway, when its exp and the leeway have passed, then it is refused even though it was remembered', async () => {
    vi.useFakeTimers({ now: start, toFake: ['Date'] });
    const verify = createTokenVerifier({ kind: 'secret', secret });
    const token = await mintToken(secret, { subject: 'user-1', organizations: ['org_a'], expiresIn: '5s' });

    // 24 s past its exp: still inside the 30 s leeway, so accepted, and remembered.
    vi.setSystemTime(start + 29_000);
    await expect(verify(`Bearer ${token}`)).resolves.toMatchObject({ subject: 'user-1' });
    // 7 s later, well within the time a token is remembered, but 32 s past its exp.
    vi.setSystemTime(start + 36_000);
    await expect(verify(`Bearer ${token}`)).rejects.toMatchObject({ code: 'unauthenticated' });
  });

  it('given a token verified once, when it comes again, then it names the same principal', async () => {
    const verify = createTokenVerifier({ kind: 'secret', secret });
    const token = await mintToken(secret, { subject: 'user-2', organizations: ['org_a', 'org_b'], scope: 'workspaces:read' });
    const first = await verify(`Bearer ${token}`);
    const again = await verify(`Bearer ${token}`);
    expect(again).toEqual(first);
    expect([...again.organizations]).toEqual(['org_a', 'org_b']);
    expect([...again.scopes]).toEqual(['workspaces:read']);
  });
});
