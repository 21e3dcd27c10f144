import type { Migration } from './migration.js';

/**
 * A cascade's deletion, once written, stays listed for an hour with its position in the log
 * (`deleted_*`, `done_at`), instead of being taken off at once: `delete_workspace` answers only
 * once the projection has applied every one of its solutions' deletions (contract §14's
 * read-your-writes), including those another instance's cascade worker wrote first, and this is
 * where it finds their positions. Rows listed before this step have none: still to do.
 */
export const cascadesDone: Migration = {
  version: 20,
  name: 'cascades done',
  when: 'always',
  sql: `
ALTER TABLE cascade_pending ADD COLUMN deleted_commit numeric(20), ADD COLUMN deleted_prepare numeric(20), ADD COLUMN done_at timestamptz;
-- The worker's passes and the backlog gauge read only what is still to do; the expiry, only what is done.
CREATE INDEX cascade_pending_to_do ON cascade_pending (workspace_id, solution_id) WHERE done_at IS NULL;
CREATE INDEX cascade_pending_done ON cascade_pending (done_at) WHERE done_at IS NOT NULL;
`,
};
