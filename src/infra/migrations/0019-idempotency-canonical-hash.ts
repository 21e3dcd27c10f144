import type { Migration } from './migration.js';

/**
 * A key's request also by its RFC 8785 canonical JSON, which a retry whose members come in another
 * order shares (src/api/idempotency.ts). Keys written before have none: they match a retry with the
 * members in the same order, as they always did.
 */
export const idempotencyCanonicalHash: Migration = {
  version: 19,
  name: 'idempotency canonical hash',
  when: 'always',
  sql: `
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS canonical_hash text;
`,
};
