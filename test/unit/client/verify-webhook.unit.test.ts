import { Webhook } from 'standardwebhooks';
import { Headers as UndiciHeaders } from 'undici';
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

  it("reads the headers of another fetch implementation's Headers (undici's) and of a Map", async () => {
    const secret = newWebhookSecret();
    expect(await verifyWebhook(secret, new UndiciHeaders(signed(secret)), body)).toEqual(JSON.parse(body));
    expect(await verifyWebhook(secret, new Map(Object.entries(signed(secret))), body)).toEqual(JSON.parse(body));
  });

  it('refuses another secret, a changed body, an old timestamp and missing headers', async () => {
    const secret = newWebhookSecret();
    await expect(verifyWebhook(newWebhookSecret(), signed(secret), body)).rejects.toThrow(WebhookVerificationError);
    await expect(verifyWebhook(secret, signed(secret), `${body} `)).rejects.toThrow(WebhookVerificationError);
    await expect(verifyWebhook(secret, signed(secret, new Date(Date.now() - 600_000)), body)).rejects.toThrow(WebhookVerificationError);
    await expect(verifyWebhook(secret, {}, body)).rejects.toThrow(WebhookVerificationError);
  });

  it('refuses signatures that are not base64 as not matching, and reads header names in any case', async () => {
    const secret = newWebhookSecret();
    for (const junk of ['v1,***not-base64***', 'v1,', 'v1', '', 'v2,abc']) {
      await expect(verifyWebhook(secret, { ...signed(secret), 'webhook-signature': junk }, body)).rejects.toThrow(WebhookVerificationError);
    }
    const good = signed(secret);
    const mixed = `v1,***not-base64*** ${good['webhook-signature']}`;
    expect(await verifyWebhook(secret, { ...good, 'webhook-signature': mixed }, body)).toEqual(JSON.parse(body));
    const capitalised = {
      'Webhook-Id': good['webhook-id'],
      'WEBHOOK-TIMESTAMP': good['webhook-timestamp'],
      'Webhook-Signature': good['webhook-signature'],
    };
    expect(await verifyWebhook(secret, capitalised, body)).toEqual(JSON.parse(body));
  });

  it('refuses a signature written otherwise than base64 writes its bytes, as standardwebhooks does', async () => {
    const secret = newWebhookSecret();
    const good = signed(secret);
    const encoded = good['webhook-signature'].slice('v1,'.length);
    // 32 bytes: 43 characters, the last carrying two spare bits, and one `=`.
    const lastCharacter = encoded.at(-2)!;
    const spareBitSet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'[
      'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'.indexOf(lastCharacter) ^ 1
    ]!;
    for (const variant of [
      encoded.slice(0, -1),
      `${encoded.slice(0, -2)}${spareBitSet}=`,
      `${encoded.slice(0, 10)}\t${encoded.slice(10)}`,
    ]) {
      const headers = { ...good, 'webhook-signature': `v1,${variant}` };
      expect(() => new Webhook(secret).verify(body, headers), variant).toThrow();
      await expect(verifyWebhook(secret, headers, body), variant).rejects.toThrow(WebhookVerificationError);
    }
  });

  it('says when the secret it is given is not a webhook secret, apart from a delivery that fails', async () => {
    const secret = newWebhookSecret();
    for (const wrong of ['my-secret', 'nope', 'secret', 'whsec_c2VjcmV0', '', 'whsec_', undefined as unknown as string]) {
      await expect(verifyWebhook(wrong, signed(secret), body)).rejects.toThrow(
        new TypeError('the webhook secret must be the one create_webhook gave: whsec_ and base64'),
      );
    }
  });
});
