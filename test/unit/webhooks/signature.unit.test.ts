import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { newWebhookSecret, signedHeaders, verifySignature } from '../../../src/webhooks/signature.js';
import { parseSchedule } from '../../../src/config.js';
import { outcomeOf, retryDelay } from '../../../src/webhooks/schedule.js';
import { retiredSecretsKept, signingSecrets } from '../../../src/webhooks/webhook.js';

describe('webhook signatures, against the standardwebhooks package', () => {
  const body = JSON.stringify({ type: 'WorkspaceCreated', timestamp: '2026-11-25T10:00:00.000000Z', data: { id: 'x' } });
  const now = Math.floor(Date.now() / 1000);

  it('makes secrets of whsec_ and 32 random bytes in base64', () => {
    const secret = newWebhookSecret();
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(secret.slice(6), 'base64')).toHaveLength(32);
    expect(newWebhookSecret()).not.toBe(secret);
  });

  it('signs what the package verifies, and what the package signs is the same signature', () => {
    const secret = newWebhookSecret();
    const headers = signedHeaders([secret], 'AAAAAAAAuzEAAAAAAAAABA', now, body);
    expect(new Webhook(secret).verify(body, headers)).toEqual(JSON.parse(body));
    expect(headers['webhook-signature']).toBe(new Webhook(secret).sign('AAAAAAAAuzEAAAAAAAAABA', new Date(now * 1000), body));
  });

  it('after a rotation, sends both signatures: each secret verifies', () => {
    const [fresh, old] = [newWebhookSecret(), newWebhookSecret()];
    const headers = signedHeaders([fresh, old], 'id1', now, body);
    expect(headers['webhook-signature']!.split(' ')).toHaveLength(2);
    for (const secret of [fresh, old]) expect(new Webhook(secret).verify(body, headers)).toBeTruthy();
    expect(() => new Webhook(newWebhookSecret()).verify(body, headers)).toThrow();
  });

  it('verifies as the package does: a changed body, another secret or an old timestamp fail', () => {
    const secret = newWebhookSecret();
    const signed = new Webhook(secret).sign('id1', new Date(now * 1000), body);
    const headers = { id: 'id1', timestamp: String(now), signature: signed };
    expect(verifySignature(secret, headers, body, now)).toBe(true);
    expect(verifySignature(secret, headers, `${body} `, now)).toBe(false);
    expect(verifySignature(newWebhookSecret(), headers, body, now)).toBe(false);
    expect(verifySignature(secret, headers, body, now + 301)).toBe(false);
  });
});

describe('the secrets an attempt is signed with', () => {
  const hour = 3_600_000;
  const rotatedAt = Date.parse('2026-11-25T10:00:00.000Z');
  const at = (ms: number) => new Date(rotatedAt + ms);
  const iso = (ms: number) => at(ms).toISOString();

  it('keeps every secret replaced within the last 24 h, each until 24 h after it was replaced, the newest first', () => {
    // S0 replaced at rotatedAt, S1 a minute later by S2.
    const row = {
      secret: 'S2',
      previous_secret: 'S1',
      previous_secret_until: at(24 * hour + 60_000),
      retired_secrets: [
        { secret: 'S1', until: iso(24 * hour + 60_000) },
        { secret: 'S0', until: iso(24 * hour) },
      ],
    };
    expect(signingSecrets(row, at(60_000))).toEqual(['S2', 'S1', 'S0']);
    expect(signingSecrets(row, at(24 * hour - 1))).toEqual(['S2', 'S1', 'S0']);
    expect(signingSecrets(row, at(24 * hour + 1))).toEqual(['S2', 'S1']);
    expect(signingSecrets(row, at(24 * hour + 60_001))).toEqual(['S2']);
  });

  it('reads the secret an earlier version left in previous_secret, and signs with at most the bound of replaced ones', () => {
    const earlier = { secret: 'S1', previous_secret: 'S0', previous_secret_until: at(24 * hour), retired_secrets: [] };
    expect(signingSecrets(earlier, at(0))).toEqual(['S1', 'S0']);
    expect(signingSecrets(earlier, at(24 * hour))).toEqual(['S1']);
    const many = Array.from({ length: 15 }, (_, i) => ({ secret: `R${i}`, until: iso(24 * hour - i) }));
    const signing = signingSecrets({ secret: 'S', previous_secret: null, previous_secret_until: null, retired_secrets: many }, at(0));
    expect(signing).toEqual(['S', ...many.slice(0, retiredSecretsKept).map(({ secret }) => secret)]);
  });
});

describe('the retry schedule', () => {
  it("is the contract's by default, configurable, and refuses malformed text", () => {
    expect(parseSchedule('5s,5m,30m,2h,5h,10h,10h')).toEqual([5000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000]);
    expect(parseSchedule('100ms,1s')).toEqual([100, 1000]);
    for (const bad of ['', '5', '5x', '1s,,2s', '-1s']) expect(parseSchedule(bad), bad).toBeUndefined();
  });

  it('waits the next delay ±20 %, and has none after the last', () => {
    const schedule = [1000, 2000];
    expect(retryDelay(schedule, 1, 0)).toBe(800);
    expect(retryDelay(schedule, 1, 0.999999)).toBe(1200);
    expect(retryDelay(schedule, 2, 0.5)).toBe(2000);
    expect(retryDelay(schedule, 3, 0.5)).toBeUndefined();
    // Taken up to 520 ms after it is due, an attempt still lands within ±20 % of the schedule's delay.
    expect(retryDelay([5000], 1, 0.999999, 520)).toBe(5480);
    expect(retryDelay([5000], 1, 0, 520)).toBe(4000);
    expect(retryDelay([1000], 1, 0.999999, 520)).toBe(800);
  });

  it('counts a 2xx as success, 410 as gone, anything else (redirects, no answer) as a failure', () => {
    expect([200, 204, 299, 410, 301, 302, 404, 500, undefined].map(outcomeOf)).toEqual([
      'succeeded',
      'succeeded',
      'succeeded',
      'gone',
      'failed',
      'failed',
      'failed',
      'failed',
      'failed',
    ]);
  });
});
