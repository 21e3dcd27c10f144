import type { Migration } from './migration.js';

/**
 * Every webhook secret replaced within the last 24 h keeps signing (contract §15), not only the
 * last one: `retired_secrets` holds them, newest first, each `{secret, until}` (when it stops
 * signing), at most `retiredSecretsKept` (src/webhooks/webhook.ts). A secret an earlier rotation
 * left in `previous_secret` and still signing is moved in. `previous_secret` and
 * `previous_secret_until` are still written, as the last secret replaced, for an instance of an
 * earlier version still running during an upgrade; what such an instance rotates is read from
 * them too (signingSecrets).
 */
export const retiredWebhookSecrets: Migration = {
  version: 17,
  name: 'retired webhook secrets',
  when: 'always',
  sql: `
ALTER TABLE webhooks ADD COLUMN retired_secrets jsonb NOT NULL DEFAULT '[]';
UPDATE webhooks SET retired_secrets = jsonb_build_array(jsonb_build_object('secret', previous_secret, 'until', previous_secret_until))
WHERE previous_secret IS NOT NULL AND previous_secret_until > now();
`,
};
