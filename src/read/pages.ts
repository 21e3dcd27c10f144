export type PageRequest = { page: number; size: number };
export type Page<T> = { total: number; page: number; size: number; items: T[] };

/** Splits a list query's rows (the total on every row, item columns null when the page is empty). */
export function toPage<T>(rows: (T & { total: string; sort_at: unknown })[], request: PageRequest, hasItem: (row: T) => boolean): Page<T> {
  const total = Number(rows[0]?.total ?? 0);
  const items = rows.filter(hasItem).map(({ total: _total, sort_at: _sortAt, ...item }) => item as unknown as T);
  return { total, page: request.page, size: request.size, items };
}

/** As a decimal string: (page - 1) * size can pass 2^53 for the largest pages. */
export const offsetOf = (request: PageRequest) => ((BigInt(request.page) - 1n) * BigInt(request.size)).toString();

/**
 * The ids of one page of `table` across organizations, in (created_at, id) order. One index-ordered
 * scan per organization, merged (Merge Append), so no sort: `organization_id = ANY(...)` would scan
 * and sort every matching row. Organization ids become parameters from `$firstParameter` on.
 * `rowCondition` is the predicate of a partial index on (organization_id, created_at, id), which
 * the scans can use only when they state it.
 */
export function pageIdsAcrossOrganizations(
  table: string,
  organizations: readonly string[],
  firstParameter: number,
  rowCondition = 'true',
): string {
  if (organizations.length === 0) return 'SELECT NULL::text AS id WHERE false OFFSET $2 LIMIT $3';
  const scans = organizations.map(
    // The inner LIMIT also keeps the index order when the table has no statistics yet.
    (_, index) =>
      `(SELECT id, created_at FROM ${table} WHERE organization_id = $${firstParameter + index} AND ${rowCondition} ORDER BY created_at, id LIMIT $2::bigint + $3)`,
  );
  return `SELECT id FROM (${scans.join(' UNION ALL ')}) merged ORDER BY created_at, id OFFSET $2 LIMIT $3`;
}
