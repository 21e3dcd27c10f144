import { createHmac, randomBytes, timingSafeEqual } from 'crypto';

/**
 * Webhook secrets and signatures as the Standard Webhooks specification has them (contract §15):
 * a secret is `whsec_` and the base64 of 32 random bytes; a signature is `v1,` and the base64
 * HMAC-SHA256, keyed with the secret's bytes, of `id.timestamp.body`. Tested against the
 * `standardwebhooks` package (test/unit/webhooks/signature.unit.test.ts).
 */

const secretPrefix = 'whsec_';

export function newWebhookSecret(): string {
  return `${secretPrefix}${randomBytes(32).toString('base64')}`;
}

const keyOf = (secret: string): Buffer =>
  Buffer.from(secret.startsWith(secretPrefix) ? secret.slice(secretPrefix.length) : secret, 'base64');

/** One `v1,<base64>` signature of a message. */
function signature(secret: string, id: string, timestampSeconds: number, body: string): string {
  return `v1,${createHmac('sha256', keyOf(secret)).update(`${id}.${timestampSeconds}.${body}`).digest('base64')}`;
}

/** The `webhook-*` headers of one attempt: every secret's signature, space separated (after a rotation, the new one's first). */
export function signedHeaders(secrets: readonly string[], id: string, timestampSeconds: number, body: string): Record<string, string> {
  return {
    'webhook-id': id,
    'webhook-timestamp': String(timestampSeconds),
    'webhook-signature': secrets.map((secret) => signature(secret, id, timestampSeconds, body)).join(' '),
  };
}

/** Whether any signature of `header` is the secret's, and the timestamp within `toleranceSeconds` of `nowSeconds`. */
export function verifySignature(
  secret: string,
  headers: { id: string; timestamp: string; signature: string },
  body: string,
  nowSeconds: number,
  toleranceSeconds = 300,
): boolean {
  const timestamp = Number(headers.timestamp);
  if (!/^\d+$/.test(headers.timestamp) || Math.abs(nowSeconds - timestamp) > toleranceSeconds) return false;
  const expected = Buffer.from(signature(secret, headers.id, timestamp, body));
  return headers.signature.split(' ').some((candidate) => {
    const given = Buffer.from(candidate);
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
}
