/**
 * How many events the projector reads at a time. Caught up, it reads small pages, so that each
 * append is projected on its own within a millisecond or two; behind, each full page doubles the
 * next, up to `max`, so that a backlog is applied in large batches (rows loaded once per batch,
 * one multi-row write, one round trip per table) and the per-batch costs stop mattering. A page
 * that comes back short means the end of the log was reached: back to small pages.
 */
export type PageSizes = { min: number; max: number };

export const defaultPageSizes: PageSizes = { min: 500, max: 20_000 };

export function nextPageSize(current: number, read: number, sizes: PageSizes): number {
  if (read < current) return sizes.min;
  return Math.min(Math.max(current * 2, sizes.min), sizes.max);
}
