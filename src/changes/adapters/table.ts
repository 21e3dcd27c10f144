import { named, type Pool } from '../../infra/postgres.js';
import type { ChangeEntry, ChangeQuery, StoredChange } from '../feed.js';

/** The changes table's SQL (schema in src/projections/schema.ts): the projector's insert and the feed's read. */

/**
 * A column of the record's first row, for an update's row: one probe of the (stream, version) key,
 * made only when the row lacks it (COALESCE evaluates no more than it needs). A join there let the
 * planner scan the whole table for every batch while its statistics said the table was small.
 */
const firstRowOf = (column: 'organization_id' | 'workspace_id') =>
  `COALESCE(given.${column}, (SELECT first.${column} FROM changes first WHERE first.stream_name = given.stream_name AND first.version = 1))`;

/**
 * The projector's step (src/projections/tables.ts writeChanges): inserts a batch's rows when
 * `condition` holds (the checkpoint moved). An update takes its organization and workspace from
 * its record's first row; a record whose creation is not in the table (an operator skipped it as
 * a dead letter) belongs to no organization, and its changes to nobody's feed. The rows are a
 * function of the events, so a row met again is the same row: nothing to update.
 */
export function insertChanges(parameter: (value: unknown) => string, entries: readonly ChangeEntry[], condition: string): string {
  return `INSERT INTO changes (organization_id, commit_position, prepare_position, workspace_id, stream_name, version, type,
       record_id, occurred_at, actor, data)
     SELECT * FROM (
       SELECT ${firstRowOf('organization_id')} AS organization_id, commit_position, prepare_position,
         ${firstRowOf('workspace_id')} AS workspace_id, stream_name, version, type, record_id, occurred_at, actor, data
       FROM jsonb_to_recordset(${parameter(JSON.stringify(entries))}::jsonb) AS given(commit_position numeric,
         prepare_position numeric, stream_name text, version bigint, type text, record_id text, organization_id text,
         workspace_id text, occurred_at text, actor text, data jsonb)
     ) AS r
     WHERE ${condition} AND r.organization_id IS NOT NULL
     ON CONFLICT DO NOTHING`;
}

const columns = `commit_position::text, prepare_position::text, type, record_id, organization_id, workspace_id, version::text,
  occurred_at, actor, data`;

/**
 * At most `limit + 1` changes after `after`, in log order. Each organization's rows are read on
 * its own key range (at most `limit + 1` each) and merged, so a page costs what the caller's
 * organizations hold after the cursor, never the rest of the log; a workspace filter reads that
 * workspace's range.
 */
export async function readChanges(pool: Pool, query: ChangeQuery): Promise<StoredChange[]> {
  if (query.organizations.length === 0 || query.types.length === 0) return [];
  const after = [query.after.commit.toString(), query.after.prepare.toString()];
  const fetched = query.limit + 1;
  if (query.workspaceId !== undefined) {
    const { rows } = await pool.query<StoredChange>(
      named(
        `SELECT ${columns} FROM changes
         WHERE workspace_id = $1 AND organization_id = ANY($2) AND (commit_position, prepare_position) > ($3, $4) AND type = ANY($5)
         ORDER BY changes.commit_position, changes.prepare_position LIMIT $6`,
        [query.workspaceId, query.organizations, ...after, query.types, fetched],
      ),
    );
    return rows;
  }
  const { rows } = await pool.query<StoredChange>(
    named(
      `SELECT c.* FROM unnest($1::text[]) AS o(id) CROSS JOIN LATERAL (
         SELECT ${columns} FROM changes
         WHERE organization_id = o.id AND (commit_position, prepare_position) > ($2, $3) AND type = ANY($4)
         ORDER BY changes.commit_position, changes.prepare_position LIMIT $5
       ) c
       ORDER BY c.commit_position::numeric, c.prepare_position::numeric LIMIT $5`,
      [query.organizations, ...after, query.types, fetched],
    ),
  );
  return rows;
}
