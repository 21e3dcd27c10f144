import type { Migration } from './migration.js';

/**
 * A disabled webhook's pending deliveries are parked: no `next_attempt_at`, like deliveries
 * waiting behind an earlier one of their record (src/webhooks/adapters/queue.ts, parkDisabled).
 * Left due, they stayed at the front of the due index, oldest first, and every lease read them all
 * and dropped them for their webhook: a webhook disabled after days of failures, one head per
 * record it had changes of, made every other webhook's leases cost that many rows.
 * `webhook_deliveries_scheduled` lets the sweep find a webhook's deliveries still scheduled
 * without reading those parked or waiting.
 */
export const disabledWebhooksParked: Migration = {
  version: 16,
  name: 'disabled webhooks parked',
  when: 'always',
  sql: `
CREATE INDEX webhook_deliveries_scheduled ON webhook_deliveries (webhook_id)
  WHERE status = 'pending' AND next_attempt_at IS NOT NULL;
UPDATE webhook_deliveries d SET next_attempt_at = NULL FROM webhooks w
WHERE w.id = d.webhook_id AND NOT w.enabled AND d.status = 'pending' AND d.next_attempt_at IS NOT NULL;
`,
};
