import { named, type Pool } from '../infra/postgres.js';
import { workspaceColumns } from '../projections/tables.js';
import type { WorkspaceRow } from '../projections/workspaces-table.js';
import { offsetOf, pageIdsAcrossOrganizations, toPage, type Page, type PageRequest } from './pages.js';

export async function getWorkspace(pool: Pool, id: string, organizations: readonly string[]): Promise<WorkspaceRow | undefined> {
  const { rows } = await pool.query<WorkspaceRow>(
    named(`SELECT ${workspaceColumns} FROM workspaces WHERE id = $1 AND organization_id = ANY($2)`, [id, organizations]),
  );
  return rows[0];
}

/**
 * One statement, so the total and the items come from the same snapshot. The page's ids are found
 * on the (organization_id, created_at, id) index before the rows are fetched.
 */
export async function listWorkspaces(pool: Pool, organizations: readonly string[], request: PageRequest): Promise<Page<WorkspaceRow>> {
  const { rows } = await pool.query<WorkspaceRow & { total: string; sort_at: unknown }>(
    named(
      `WITH page AS (${pageIdsAcrossOrganizations('workspaces', organizations, 4)})
     SELECT c.total, w.* FROM
       (SELECT COALESCE(SUM(workspaces), 0)::text AS total FROM organization_counts WHERE organization_id = ANY($1)) c
       LEFT JOIN LATERAL (
         SELECT ${workspaceColumns}, created_at AS sort_at FROM page JOIN workspaces USING (id)
       ) w ON true
     ORDER BY w.sort_at, w.id`,
      [organizations, offsetOf(request), request.size, ...organizations],
    ),
  );
  return toPage(rows, request, (row) => row.id !== null);
}
