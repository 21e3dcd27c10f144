import type { Migration } from './migration.js';

/**
 * The read tables leave room in each page for the next version of its rows. An update that changes
 * no indexed column (names, descriptions, attributes, documentation, updated_at, counts) then stays
 * on its page as a heap-only tuple and writes no index entry: most of what the projector writes
 * while it catches up a backlog of updates. The counts, updated by nearly every batch, leave more.
 * Pages already full keep their rows; the room shows as pages are written again.
 */
export const roomForUpdates: Migration = {
  version: 8,
  name: 'room for updates in the read tables',
  when: 'always',
  sql: `
ALTER TABLE workspaces SET (fillfactor = 80);
ALTER TABLE solutions SET (fillfactor = 80);
ALTER TABLE organization_counts SET (fillfactor = 50);
ALTER TABLE workspace_solution_counts SET (fillfactor = 50);
`,
};
