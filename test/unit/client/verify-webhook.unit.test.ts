import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { verifyWebhook, WebhookVerificationError } from '../../../src/client/index.js';
import { newWebhookSecret } from '../../../src/webhooks/signature.js';

describe("the client's verifyWebhook, against deliveries signed by the standardwebhooks package", () => {
  const body = JSON.stringify({
    type: 'WorkspaceCreated',
    timestamp: '2026-11-25T10:00:00.000000Z',
    data: { id: 'AAAAAAAAuzEAAAAAAAAABA' },
  });
  const signed = (secret: string, at = new Date()) => ({
    'webhook-id': 'AAAAAAAAuzEAAAAAAAAABA',
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': new Webhook(secret).sign('AAAAAAAAuzEAAAAAAAAABA', at, body),
  });

  it('returns the payload of a delivery signed with the secret, also as Headers and with a second signature', async () => {
    const secret = newWebhookSecret();
    expect(await verifyWebhook(secret, signed(secret), body)).toEqual(JSON.parse(body));
    const both = signed(secret);
    both['webhook-signature'] = `${signed(newWebhookSecret())['webhook-signature']} ${both['webhook-signature']}`;
    expect(await verifyWebhook(secret, new Headers(both), body)).toEqual(JSON.parse(body));
  });

  it('refuses another secret, a changed body, an old timestamp and missing headers', async () => {
    const secret = newWebhookSecret();
    await expect(verifyWebhook(newWebhookSecret(), signed(secret), body)).rejects.toThrow(WebhookVerificationError);
    await expect(verifyWebhook(secret, signed(secret), `${body} `)).rejects.toThrow(WebhookVerificationError);
    await expect(verifyWebhook(secret, signed(secret, new Date(Date.now() - 600_000)), body)).rejects.toThrow(WebhookVerificationError);
    await expect(verifyWebhook(secret, {}, body)).rejects.toThrow(WebhookVerificationError);
  });
});
