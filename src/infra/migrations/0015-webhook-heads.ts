import type { Migration } from './migration.js';

/**
 * Only the head of each record's queue of deliveries is due (src/webhooks/adapters/dispatcher.ts):
 * a delivery behind an earlier pending one of the same record for the same webhook waits with no
 * `next_attempt_at`, and becomes due when the earlier one leaves `pending`. Leasing then reads
 * due rows alone, in the order of the due index, instead of testing every pending row for an
 * earlier one: that test made each lease cost the whole backlog (66 ms for 9,000 pending, up to
 * 760 ms while the backlog grew), so a dispatcher that fell behind fell further behind.
 * `webhook_deliveries_waiting` lets the dispatcher's sweep find the waiting rows without reading
 * the others. Rows already waiting behind an earlier one are made to wait.
 */
export const webhookHeads: Migration = {
  version: 15,
  name: 'webhook heads',
  when: 'always',
  sql: `
UPDATE webhook_deliveries d SET next_attempt_at = NULL
WHERE d.status = 'pending' AND EXISTS (
  SELECT FROM webhook_deliveries e
  WHERE e.webhook_id = d.webhook_id AND e.stream_name = d.stream_name AND e.status = 'pending'
    AND (e.commit_position, e.prepare_position) < (d.commit_position, d.prepare_position));
CREATE INDEX webhook_deliveries_waiting ON webhook_deliveries (webhook_id, stream_name)
  WHERE status = 'pending' AND next_attempt_at IS NULL;
`,
};
