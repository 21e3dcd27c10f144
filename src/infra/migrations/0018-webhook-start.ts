import type { Migration } from './migration.js';

/**
 * Where a webhook's deliveries start: the change feed's position when it was created (its first
 * `enqueued_*`, which then moves on). A change after it is one the webhook was due, so
 * `redeliver_webhook_change` may send it (contract §15: the changes committed after its creation).
 * Webhooks created before this step have none (NULL): for them, a change is after their creation
 * when it occurred at or after their `created_at` (WebhookStore.redeliver), and a change already
 * given a delivery for them is one they were due in any case.
 */
export const webhookStart: Migration = {
  version: 18,
  name: 'webhook start',
  when: 'always',
  sql: `
ALTER TABLE webhooks ADD COLUMN start_commit numeric(20), ADD COLUMN start_prepare numeric(20);
`,
};
