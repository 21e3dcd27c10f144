export type PageRequest = { page: number; size: number };
export type Page<T> = { total: number; page: number; size: number; items: T[] };

/** Splits a list query's rows (the total on every row, item columns null when the page is empty). */
export function toPage<T>(rows: (T & { total: string; sort_at: unknown })[], request: PageRequest, hasItem: (row: T) => boolean): Page<T> {
  const total = Number(rows[0]?.total ?? 0);
  const items = rows.filter(hasItem).map(({ total: _total, sort_at: _sortAt, ...item }) => item as unknown as T);
  return { total, page: request.page, size: request.size, items };
}

export const offsetOf = (request: PageRequest) => (request.page - 1) * request.size;
