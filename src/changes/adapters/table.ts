import type { GlobalPosition } from '../../eventstore/port.js';
import { named, type Pool } from '../../infra/postgres.js';
import type { ChangeEntry, ChangeQuery, PageRows, StoredChange } from '../feed.js';

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

/** A change row's columns, `data` as JSON text: sized for the page's budget, then parsed once it is in the page. */
const columns = `commit_position, prepare_position, type, record_id, organization_id, workspace_id, version::text, occurred_at, actor,
  data::text AS data`;
const pageColumns =
  'commit_position::text, prepare_position::text, type, record_id, organization_id, workspace_id, version, occurred_at, actor, data';

/**
 * The most `data` (as JSON text) one page carries: a page of large records (a solution's
 * documentation may be 512 KiB) stops short of `limit` before it would pass this, and says there
 * is more, so that no answer grows past what can be built in memory (a thousand such changes are
 * more than a JavaScript string holds). The first change is shown whatever its size.
 */
const pageDataBudgetBytes = 16 * 1024 * 1024;

/**
 * The rows of `candidates` (the next `limit + 1`, in log order) that fit the page's data budget
 * (the first always),
 * and how many candidates there were: sized as they are read, so that rows past the budget are
 * never sent.
 */
const withinBudget = (candidates: string, budget: string) =>
  `SELECT ${pageColumns}, fetched::int FROM (
     SELECT sized.*, sum(size) OVER (ORDER BY commit_position, prepare_position ROWS UNBOUNDED PRECEDING) - size AS before,
       count(*) OVER () AS fetched
     FROM (SELECT candidate.*, octet_length(candidate.data) AS size FROM (${candidates}) candidate) sized
   ) page
   WHERE before = 0 OR before + size <= ${budget}
   ORDER BY page.commit_position, page.prepare_position`;

/**
 * At most `limit` changes after `after`, in log order, within the page's data budget. Each
 * organization's rows are read on its own key range (at most `limit + 1` each) and merged, so a
 * page costs what the caller's organizations hold after the cursor, never the rest of the log; a
 * workspace filter reads that workspace's range.
 */
export async function readChanges(pool: Pool, query: ChangeQuery, budgetBytes = pageDataBudgetBytes): Promise<PageRows> {
  if (query.organizations.length === 0 || query.types.length === 0) return { rows: [], more: false };
  const after = [query.after.commit.toString(), query.after.prepare.toString()];
  const fetched = query.limit + 1;
  const statement =
    query.workspaceId !== undefined
      ? named(
          withinBudget(
            `SELECT ${columns} FROM changes
             WHERE workspace_id = $1 AND organization_id = ANY($2) AND (commit_position, prepare_position) > ($3, $4) AND type = ANY($5)
             ORDER BY changes.commit_position, changes.prepare_position LIMIT $6`,
            '$7',
          ),
          [query.workspaceId, query.organizations, ...after, query.types, fetched, budgetBytes],
        )
      : named(
          withinBudget(
            `SELECT c.* FROM unnest($1::text[]) AS o(id) CROSS JOIN LATERAL (
               SELECT ${columns} FROM changes
               WHERE organization_id = o.id AND (commit_position, prepare_position) > ($2, $3) AND type = ANY($4)
               ORDER BY changes.commit_position, changes.prepare_position LIMIT $5
             ) c
             ORDER BY c.commit_position, c.prepare_position LIMIT $5`,
            '$6',
          ),
          [query.organizations, ...after, query.types, fetched, budgetBytes],
        );
  const { rows } = await pool.query<Omit<StoredChange, 'data'> & { data: string; fetched: number }>(statement);
  const candidates = rows[0]?.fetched ?? 0;
  const shown = rows
    .slice(0, query.limit)
    .map(({ fetched: _, data, ...row }): StoredChange => ({ ...row, data: JSON.parse(data) as StoredChange['data'] }));
  return { rows: shown, more: candidates > shown.length };
}

/**
 * The position of the last change of the query's organizations (and workspace), of any type,
 * after its cursor and at or before `committed`, a position the projection had committed before
 * the page was read (its rows with it), so that every change up to it was there for the page. A
 * page that read to the end continues from there: past the changes its types leave out, which it
 * would otherwise read again on every call. Only the caller's organizations: `next` shows nothing
 * of another's.
 */
export async function lastChangeThrough(pool: Pool, query: ChangeQuery, committed: GlobalPosition): Promise<GlobalPosition | undefined> {
  const range = [query.after.commit.toString(), query.after.prepare.toString(), committed.commit.toString(), committed.prepare.toString()];
  const within = (first: number) =>
    `(commit_position, prepare_position) > ($${first}, $${first + 1}) AND (commit_position, prepare_position) <= ($${first + 2}, $${first + 3})
     ORDER BY commit_position DESC, prepare_position DESC LIMIT 1`;
  const { rows } = await pool.query<{ commit_position: string; prepare_position: string }>(
    query.workspaceId !== undefined
      ? named(
          `SELECT commit_position::text, prepare_position::text FROM changes WHERE workspace_id = $1 AND organization_id = ANY($2) AND ${within(3)}`,
          [query.workspaceId, query.organizations, ...range],
        )
      : named(
          `SELECT last.commit_position::text, last.prepare_position::text FROM unnest($1::text[]) AS o(id) CROSS JOIN LATERAL (
             SELECT commit_position, prepare_position FROM changes WHERE organization_id = o.id AND ${within(2)}
           ) last
           ORDER BY last.commit_position DESC, last.prepare_position DESC LIMIT 1`,
          [query.organizations, ...range],
        ),
  );
  const last = rows[0];
  return last && { commit: BigInt(last.commit_position), prepare: BigInt(last.prepare_position) };
}
