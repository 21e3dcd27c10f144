/**
 * What `/readyz` answers and the `wsapi_ready` gauge reports: each check by name (`ok`, or for the
 * projection `caught_up`, when it passes; a projection `behind` also carries
 * `projection_backlog_events` and `projection_catch_up_seconds`, null while unknown) and whether
 * every one passes. The checks themselves read the stores (src/projections/readiness.ts); these
 * ground-level types let the metrics and the API take them without importing the layers above.
 */
export type Readiness = { ready: boolean; checks: Record<string, string | number | null> };

/** The checks readiness passes or fails, each a `check` of `wsapi_ready`; the others describe a failure. */
export const readinessParts = ['event_store', 'read_database', 'projection'] as const;

/** Events the projection has still to apply, and the seconds that takes at its recent rate (NaN: unknown). */
export type ProjectionBacklog = { events: number; catchUpSeconds: number };
