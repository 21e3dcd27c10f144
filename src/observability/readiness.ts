/**
 * What `/readyz` answers and the `wsapi_ready` gauge reports: each check by name (`ok`, or for the
 * projection `caught_up`, when it passes) and whether every one passes. The checks themselves
 * read the stores (src/projections/readiness.ts); this ground-level type lets the metrics and the
 * API take them without importing the layers above.
 */
export type Readiness = { ready: boolean; checks: Record<string, string> };
