import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { readinessParts, type ProjectionBacklog, type Readiness } from './readiness.js';

/** Every metric name starts with this, the process metrics included. */
export const metricPrefix = 'wsapi_';

/** Request and store call latencies, 1 ms to 10 s. */
const latencyBuckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/**
 * Command steps, finer below 50 ms: the projection wait's target is 10 ms at p99 (docs/production.md),
 * which the request buckets cannot tell from 25 or 50 ms.
 */
const stepBuckets = [
  0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1,
  2.5, 5, 10,
];

/** The projection lag is counted by reading at most this many unprojected events per scrape. */
export const projectionLagProbeLimit = 1000;

/** What the metrics read at each scrape: state that is cheaper to ask for than to track. */
export type ScrapeSources = {
  readiness: () => Promise<Readiness>;
  /** Events written but not yet projected (up to a cap), and the age of the oldest of them. */
  projectionLag: () => Promise<{ events: number; seconds: number }>;
  /** How far behind the log's end the projection is (src/projections/readiness.ts). */
  projectionBacklog: () => Promise<ProjectionBacklog>;
  /** Solutions hidden with their deleted workspace still waiting for their own SolutionDeleted. */
  cascadeBacklog: () => Promise<number>;
  /** Dead letters by state: the one the projector is stopped at, and those skipped or applied on a retry. */
  deadLetters: () => Promise<Record<'blocking' | 'skipped' | 'retried', number>>;
};

/**
 * How long a scrape waits for each read of state. A store that takes connections and never
 * answers would otherwise hold the scrape for the reads' own limits (15 s), past Prometheus's
 * default scrape timeout (10 s): every series would go stale, and the instance look down rather
 * than not ready.
 */
const scrapeReadLimitMs = 2_000;

/** What `read` answers, or `fallback` if it fails or has not answered within `scrapeReadLimitMs`. */
function withinScrape<T, F>(read: Promise<T>, fallback: F): Promise<T | F> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<F>((resolve) => (timer = setTimeout(() => resolve(fallback), scrapeReadLimitMs)));
  return Promise.race([read.catch(() => fallback), late]).finally(() => clearTimeout(timer));
}

/**
 * One read shared by the gauges that report parts of it within a scrape: calls while it runs get
 * the same answer. A read that fails or is late answers undefined, which the gauges report as NaN
 * (unknown) rather than failing or holding up the whole scrape.
 */
function sharedProbe<T>(read: () => Promise<T>): () => Promise<T | undefined> {
  let running: Promise<T | undefined> | undefined;
  return () => (running ??= withinScrape(read(), undefined).finally(() => (running = undefined)));
}

/**
 * The service's Prometheus metrics, on a registry of its own: several instances in one process
 * (the tests) each count their own. Components are handed the instruments they record into; the
 * gauges of state (readiness, projection lag, the cascade backlog) ask `ScrapeSources` at scrape time.
 */
export class Metrics {
  readonly registry = new Registry();

  readonly requests = new Counter({
    name: `${metricPrefix}http_requests_total`,
    help: 'HTTP requests answered, by API operation (or route) and status code',
    labelNames: ['operation', 'status'] as const,
    registers: [this.registry],
  });

  readonly requestDuration = new Histogram({
    name: `${metricPrefix}http_request_duration_seconds`,
    help: 'Time from a request arriving to its answer being sent, by API operation (or route) and status code',
    labelNames: ['operation', 'status'] as const,
    buckets: latencyBuckets,
    registers: [this.registry],
  });

  readonly changeStreamsOpen = new Gauge({
    name: `${metricPrefix}change_streams_open`,
    help: 'Change streams (list_changes as Server-Sent Events) open at this instance',
    registers: [this.registry],
  });

  readonly idempotencyReplays = new Counter({
    name: `${metricPrefix}idempotency_replays_total`,
    help: 'Keyed commands answered with the kept answer of an earlier request (idempotent-replayed: true)',
    labelNames: ['operation'] as const,
    registers: [this.registry],
  });

  readonly commandConflicts = new Counter({
    name: `${metricPrefix}command_conflicts_total`,
    help: 'Command appends refused because another write changed the record first (wrong expected version)',
    registers: [this.registry],
  });

  readonly commandRetries = new Counter({
    name: `${metricPrefix}command_retries_total`,
    help: 'Command attempts repeated after a conflict (a conflict on the last allowed attempt answers 503 instead)',
    registers: [this.registry],
  });

  readonly commandSteps = new Histogram({
    name: `${metricPrefix}command_step_duration_seconds`,
    help: 'Where a command spends its time, by step: wait_turn (behind the groups of its record), read (its stream), decide, append, wait_earlier_creations (list order, creations only), wait_projection (read-your-writes)',
    labelNames: ['step'] as const,
    buckets: stepBuckets,
    registers: [this.registry],
  });

  readonly eventStoreCallDuration = new Histogram({
    name: `${metricPrefix}event_store_call_duration_seconds`,
    help: 'Event store calls, by call (append, read_stream, read_all, read_log_by_stream, read_last_position, ping) and outcome (ok, conflict, error)',
    labelNames: ['call', 'outcome'] as const,
    buckets: latencyBuckets,
    registers: [this.registry],
  });

  readonly projectorBatchEvents = new Histogram({
    name: `${metricPrefix}projector_batch_events`,
    help: 'Events in each batch the active projector applied',
    buckets: [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000],
    registers: [this.registry],
  });

  readonly projectorBatchDuration = new Histogram({
    name: `${metricPrefix}projector_batch_duration_seconds`,
    help: 'Time to apply one batch to the read tables with its checkpoint, in one transaction',
    buckets: latencyBuckets,
    registers: [this.registry],
  });

  readonly foreignEvents = new Counter({
    name: `${metricPrefix}foreign_events_total`,
    help: 'Events another program wrote into a service stream, left out of every read and counted once each, by reason: no_metadata, foreign_metadata',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });

  readonly integrityTreeFailures = new Counter({
    name: `${metricPrefix}integrity_tree_failures_total`,
    help: "Rounds of the integrity tree's keeper that failed (the event store or database away, or a fault): each is retried, backing off up to 5 s",
    registers: [this.registry],
  });

  readonly integrityEventsLeftOut = new Counter({
    name: `${metricPrefix}integrity_events_left_out_total`,
    help: 'Events of the log the integrity tree did not take, by reason: no_organization (its stream names none), repeated_version (a version the tree holds already: the log was changed under the service)',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });

  readonly webhookAttempts = new Counter({
    name: `${metricPrefix}webhook_attempts_total`,
    help: 'Webhook delivery attempts by outcome: succeeded, retry (failed, tried again later), failed (schedule spent), gone (410: webhook disabled)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  readonly webhookAttemptDuration = new Histogram({
    name: `${metricPrefix}webhook_attempt_duration_seconds`,
    help: "One webhook attempt, from sending to the receiver's answer (or the timeout)",
    buckets: latencyBuckets,
    registers: [this.registry],
  });

  readonly webhookDeliveryLatency = new Histogram({
    name: `${metricPrefix}webhook_delivery_latency_seconds`,
    help: 'From a change (its occurred_at) to its successful delivery to a webhook',
    buckets: [...latencyBuckets, 30, 60, 300, 3600],
    registers: [this.registry],
  });

  /** The age of the oldest pending webhook delivery, read at scrape time (set when the service starts). */
  webhookOldestPending: (() => Promise<number>) | undefined;

  private sources: ScrapeSources | undefined;

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: metricPrefix });
    // Shown at 0 from the start: a series that first appears at 1 has no increase for an alert to see.
    for (const reason of ['no_organization', 'repeated_version'] as const) this.integrityEventsLeftOut.inc({ reason }, 0);
    const sources = () => this.sources;
    const oldestPending = () => this.webhookOldestPending?.() ?? Promise.resolve(0);

    new Gauge({
      name: `${metricPrefix}webhook_oldest_pending_seconds`,
      help: 'Age of the oldest webhook delivery still pending (0 when none); NaN when the database cannot be read',
      registers: [this.registry],
      async collect() {
        this.set(await withinScrape(oldestPending(), NaN));
      },
    });

    new Gauge({
      name: `${metricPrefix}ready`,
      help: '1 when /readyz would answer 200, else 0; the check label names each part (event_store, read_database, projection), NaN while a part cannot be checked',
      labelNames: ['check'] as const,
      registers: [this.registry],
      async collect() {
        const source = sources();
        if (!source) return;
        // A readiness check that fails outright is a plain "not ready"; the scrape itself must answer.
        const readiness: Readiness = await withinScrape(source.readiness(), { ready: false, checks: {} });
        this.reset();
        this.set({ check: 'all' }, readiness.ready ? 1 : 0);
        // The parts /readyz passes or fails; what comes with a failed one (a dead letter's or the
        // log's description, a backlog's figures) is in /readyz's body and in gauges of its own.
        // A part not checked (the projection while a store is unreachable) is unknown, NaN: its
        // series stays, so that a dashboard's line or an alert's rule on it does not lose it.
        for (const check of readinessParts) {
          const value = readiness.checks[check];
          this.set({ check }, value === undefined ? NaN : value === 'ok' || value === 'caught_up' ? 1 : 0);
        }
      },
    });

    // One probe serves each pair of gauges below: the second reads what the first fetched in the same scrape.
    const probeLag = sharedProbe(() => sources()?.projectionLag() ?? Promise.resolve({ events: 0, seconds: 0 }));
    new Gauge({
      name: `${metricPrefix}projection_lag_events`,
      help: `Events in the log this instance has not seen projected yet (counted up to ${projectionLagProbeLimit}); NaN when the stores cannot be read`,
      registers: [this.registry],
      async collect() {
        this.set((await probeLag())?.events ?? NaN);
      },
    });
    new Gauge({
      name: `${metricPrefix}projection_lag_seconds`,
      help: 'Age of the oldest event not yet projected (0 when caught up); NaN when the stores cannot be read',
      registers: [this.registry],
      async collect() {
        this.set((await probeLag())?.seconds ?? NaN);
      },
    });
    const probeBacklog = sharedProbe(() => sources()?.projectionBacklog() ?? Promise.resolve({ events: 0, catchUpSeconds: 0 }));
    new Gauge({
      name: `${metricPrefix}projection_backlog_events`,
      help: "Events between the projection's checkpoint and the log's end, as the event store estimates them; NaN when the stores cannot be read",
      registers: [this.registry],
      async collect() {
        this.set((await probeBacklog())?.events ?? NaN);
      },
    });
    new Gauge({
      name: `${metricPrefix}projection_catch_up_seconds`,
      help: "Seconds the projection needs to reach the log's end at the rate it moved at over the last 10 s (0 when caught up); NaN when unknown",
      registers: [this.registry],
      async collect() {
        this.set((await probeBacklog())?.catchUpSeconds ?? NaN);
      },
    });
    new Gauge({
      name: `${metricPrefix}cascade_pending_solutions`,
      help: 'Solutions of deleted workspaces still waiting for their own SolutionDeleted event; NaN when the database cannot be read',
      registers: [this.registry],
      async collect() {
        const source = sources();
        if (source) this.set(await withinScrape(source.cascadeBacklog(), NaN));
      },
    });
    new Gauge({
      name: `${metricPrefix}projection_dead_letters`,
      help: 'Events of the service the projector could not apply, by state: blocking (it is stopped at it), skipped and retried (resolved by an operator); NaN when the database cannot be read',
      labelNames: ['state'] as const,
      registers: [this.registry],
      async collect() {
        const source = sources();
        if (!source) return;
        // A database that cannot be read is NaN (unknown), as for the other gauges; the scrape still answers.
        const counts = await withinScrape(source.deadLetters(), { blocking: NaN, skipped: NaN, retried: NaN });
        for (const [state, count] of Object.entries(counts)) this.set({ state }, count);
      },
    });
  }

  /** Connects the state gauges to what they read; until then they report nothing. */
  watch(sources: ScrapeSources): void {
    this.sources = sources;
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /** The Prometheus text exposition of every metric. */
  scrape(): Promise<string> {
    return this.registry.metrics();
  }
}
