import { named, type Pool } from '../infra/postgres.js';
import type { SolutionRow } from '../projections/solutions-table.js';
import { solutionColumns } from '../projections/tables.js';
import { offsetOf, pageIdsAcrossOrganizations, toPage, type Page, type PageRequest } from './pages.js';

export async function getSolution(pool: Pool, id: string, organizations: readonly string[]): Promise<SolutionRow | undefined> {
  const { rows } = await pool.query<SolutionRow>(
    named(`SELECT ${solutionColumns} FROM solutions WHERE id = $1 AND organization_id = ANY($2)`, [id, organizations]),
  );
  return rows[0];
}

/** Solutions of the given organizations, optionally of one workspace; total and items from one snapshot. */
export async function listSolutions(
  pool: Pool,
  organizations: readonly string[],
  workspaceId: string | undefined,
  request: PageRequest,
): Promise<Page<SolutionRow>> {
  const total =
    workspaceId === undefined
      ? 'SELECT COALESCE(SUM(solutions), 0)::text AS total FROM organization_counts WHERE organization_id = ANY($1)'
      : `SELECT COALESCE(SUM(c.solutions), 0)::text AS total FROM workspace_solution_counts c
         JOIN workspaces w ON w.id = c.workspace_id WHERE c.workspace_id = $4 AND w.organization_id = ANY($1)`;
  const pageIds =
    workspaceId === undefined
      ? pageIdsAcrossOrganizations('solutions', organizations, 4)
      : 'SELECT id FROM solutions WHERE workspace_id = $4 AND organization_id = ANY($1) ORDER BY created_at, id OFFSET $2 LIMIT $3';
  const { rows } = await pool.query<SolutionRow & { total: string; sort_at: unknown }>(
    named(
      `WITH page AS (${pageIds})
     SELECT c.total, s.* FROM (${total}) c
       LEFT JOIN LATERAL (
         SELECT ${solutionColumns}, created_at AS sort_at FROM page JOIN solutions USING (id)
       ) s ON true
     ORDER BY s.sort_at, s.id`,
      workspaceId === undefined
        ? [organizations, offsetOf(request), request.size, ...organizations]
        : [organizations, offsetOf(request), request.size, workspaceId],
    ),
  );
  return toPage(rows, request, (row) => row.id !== null);
}
