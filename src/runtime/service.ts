import { createHash } from 'node:crypto';
import { customAlphabet } from 'nanoid';
import type { Logger } from 'pino';
import { buildApp, type AppOptions, type AppServices } from '../api/app.js';
import type { AuthSettings } from '../api/auth.js';
import { createTokenVerifier } from '../api/auth.js';
import { claimsNotMoved, IdempotencyKeys } from '../api/idempotency.js';
import type { Queries, Webhooks } from '../api/operations.js';
import { recordHistory, solutionAsOf, workspaceAsOf } from '../audit/adapters/history-reads.js';
import { recordDiff, recordProvenance } from '../audit/adapters/provenance-reads.js';
import { createChangeFeed } from '../changes/adapters/feed.js';
import { DeliveryThread } from '../webhooks/adapters/delivery-thread.js';
import { anyWebhookEnabled, oldestPendingSeconds } from '../webhooks/adapters/queue.js';
import { WebhookStore } from '../webhooks/adapters/store.js';
import { targetProblem } from '../webhooks/adapters/targets.js';
import type { Config } from '../config.js';
import { foreignEventLog, reportForeignEvents } from '../eventstore/event-log.js';
import { InstrumentedEventStore } from '../eventstore/instrumented.js';
import type { EventStore } from '../eventstore/port.js';
import { PostgresEventStore } from '../eventstore/postgres.js';
import { createClock } from '../infra/clock.js';
import { readOrCreateDevelopmentSecret } from '../infra/embedded-postgres.js';
import type { Pool } from '../infra/postgres.js';
import { Metrics, projectionLagProbeLimit } from '../observability/metrics.js';
import { deadLetterCounts } from '../projections/dead-letters.js';
import { catchUpBacklogEvents, measureProjectionLag, ProjectionProgress } from '../projections/progress.js';
import { checkReadiness, measureBacklog } from '../projections/readiness.js';
import { ProjectionRunner } from '../projections/runner.js';
import { getSolution, listSolutions } from '../read/solutions.js';
import { getWorkspace, listWorkspaces } from '../read/workspaces.js';
import { openStores } from './stores.js';
import { CascadeWorker } from '../write/cascade.js';
import type { CommandObserver } from '../write/execute.js';
import { CommandHandlers } from '../write/handlers.js';
import { PostgresSnapshots } from '../write/snapshots.js';
import { PostgresCommandIndex } from '../write/command-index.js';
import { loadSigningKey } from '../integrity/adapters/signing-key.js';
import { registerSigningKey } from '../integrity/adapters/tables.js';
import { auditKeys, consistencyProof, getCheckpoint, recordProof } from '../integrity/adapters/proofs.js';
import { TreeKeeper } from '../integrity/adapters/tree-keeper.js';
import { fromMicros, toMicros } from '../domain/timestamp.js';

/** Generated ids: nanoid's alphabet and length (21), as contract §4 says. */
const nanoid = customAlphabet('0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-', 21);
/** The same 21-character shape, derived from a seed (a caller's Idempotency-Key and request). */
const idFromSeed = (seed: string) => createHash('sha256').update(seed).digest('base64url').slice(0, 21);

export type Runtime = {
  services: AppServices;
  auth: AuthSettings;
  databaseUrl: string;
  pool: Pool;
  store: EventStore;
  projector: ProjectionRunner;
  progress: ProjectionProgress;
  cascade: CascadeWorker;
  /** Keeps the organizations' Merkle trees and signs their checkpoints (contract §16). */
  treeKeeper: TreeKeeper;
  dispatcher: DeliveryThread;
  /**
   * Stops the background work, closes pools and stops an embedded database, in that order,
   * telling `onStep` what it is doing (for a stop that takes too long to say where it was held).
   */
  close: (onStep?: (step: string) => void) => Promise<void>;
};

export type RuntimeOptions = {
  /** Whether this instance competes to run the projector (tests may run a command-only instance). */
  runProjector?: boolean;
  projectorBatchSize?: number;
  /** Whether this instance keeps the integrity trees (tests may run one that does not). */
  runTreeKeeper?: boolean;
  /** Whether this instance delivers webhooks (every instance does by default; they share the work). */
  deliverWebhooks?: boolean;
};

async function resolveAuth(config: Config): Promise<AuthSettings> {
  const { issuer, audience } = config.auth;
  if (config.auth.jwksUrl) return { kind: 'jwks', jwksUrl: config.auth.jwksUrl, issuer, audience };
  if (config.auth.jwtSecret) return { kind: 'secret', secret: config.auth.jwtSecret, issuer, audience };
  // parseConfig already demands a secret or JWKS with DATABASE_URL: only embedded mode gets here.
  return { kind: 'secret', secret: await readOrCreateDevelopmentSecret(config.dataDir), issuer, audience };
}

/** Everything the service runs on, wired together: database, event store, projector, handlers. */
export async function startRuntime(config: Config, logger: Logger, options: RuntimeOptions = {}): Promise<Runtime> {
  const stores = await openStores(config, logger, { poolSize: 20, listen: true });
  const { databaseUrl, pool, listener } = stores;
  try {
    const auth = await resolveAuth(config);
    const metrics = new Metrics();
    // Every event store call the service makes is timed and traced, whichever adapter serves it.
    const store = new InstrumentedEventStore(stores.store, metrics.eventStoreCallDuration);
    reportForeignEvents(
      store,
      foreignEventLog(logger, (reason) => metrics.foreignEvents.inc({ reason })),
    );
    const observer: CommandObserver = {
      onConflict: (retrying) => {
        metrics.commandConflicts.inc();
        if (retrying) metrics.commandRetries.inc();
      },
      onStep: (step, seconds) => metrics.commandSteps.observe({ step }, seconds),
    };
    const progress = new ProjectionProgress(pool, (from, to) => store.estimateEventsBetween(from, to), listener, logger);
    await progress.refresh();
    const cascade = new CascadeWorker(store, pool, logger, observer);
    const projector = new ProjectionRunner({
      connectionString: databaseUrl,
      store,
      progress,
      logger: logger.child({ component: 'projector' }),
      batchSize: options.projectorBatchSize,
      maxBatchSize: config.projectorMaxBatchEvents,
      cachedRows: config.projectorCachedRows,
      bulkCatchUpEvents: config.projectorBulkCatchUpEvents || undefined,
      onCascadesPending: () => cascade.drainAll(),
      onBatchApplied: (events, seconds) => {
        metrics.projectorBatchEvents.observe(events);
        metrics.projectorBatchDuration.observe(seconds);
      },
    });
    // Appends wake this process's projector directly; other instances hear of them only while theirs is active.
    if (stores.store instanceof PostgresEventStore) stores.store.readLocally(() => projector.isActive);

    const snapshots = new PostgresSnapshots(pool, logger);
    const signingKey = await loadSigningKey(config.audit.signingKey, config.dataDir);
    await registerSigningKey(pool, signingKey.publicJwk);
    const clock = createClock();
    const treeKeeper = new TreeKeeper({
      pool,
      store,
      key: signingKey,
      now: clock,
      before: (timestamp, milliseconds) => fromMicros(toMicros(timestamp) - BigInt(milliseconds) * 1000n),
      logger: logger.child({ component: 'integrity' }),
      checkpointIntervalMs: config.audit.checkpointIntervalMs,
      deferWhile: async () => (await measureBacklog(store, progress)).events >= catchUpBacklogEvents,
      onRoundFailed: () => metrics.integrityTreeFailures.inc(),
      onLeftOut: (reason) => metrics.integrityEventsLeftOut.inc({ reason }),
    });

    const commands = new CommandHandlers({
      store,
      cascade,
      clock,
      newId: (prefix, seed) => `${prefix}${seed === undefined ? nanoid() : idFromSeed(seed)}`,
      awaitProjection: async (position, timeoutMs) => {
        // Behind by more than the wait could make up at the rate the projection moves (a backlog
        // being caught up), the command answers at once, as after a wait that ran out: /readyz and
        // the backlog metrics say why, so no line per command either.
        if (progress.outOfReach(position, timeoutMs)) return false;
        const reached = await progress.waitFor(position, timeoutMs);
        // Stopped at a dead letter, every command answers at once: the projector has logged the
        // event once, and /readyz names it; a line per command would add nothing.
        if (!reached && !progress.stopped) logger.warn({ waitedMs: timeoutMs }, 'projection did not catch up in time; answering anyway');
        return reached;
      },
      projectionWaitMs: config.projectionWaitMs,
      projectedPosition: () => progress.current,
      logger,
      observer,
      recordQueueLimit: config.recordQueueLimit,
      recordRateLimit: config.recordRateLimit,
      snapshots,
      commandIndex: new PostgresCommandIndex(pool, logger),
      withoutHashes: config.audit.benchWithoutIntegrity,
    });

    const queries: Queries = {
      getWorkspace: (id, organizations) => getWorkspace(pool, id, organizations),
      workspaceAsOf: (id, organizations, asOf) => workspaceAsOf(store, id, organizations, asOf, snapshots),
      solutionAsOf: (id, organizations, asOf) => solutionAsOf(store, id, organizations, asOf, snapshots),
      history: (kind, id, organizations, page) => recordHistory(store, kind, id, organizations, page),
      listWorkspaces: (organizations, page) => listWorkspaces(pool, organizations, page),
      getSolution: (id, organizations) => getSolution(pool, id, organizations),
      listSolutions: (organizations, workspaceId, page) => listSolutions(pool, organizations, workspaceId, page),
      provenance: (kind, id, organizations, asOf, pointer) => recordProvenance(store, snapshots, kind, id, organizations, asOf, pointer),
      diff: (kind, id, organizations, from, to) => recordDiff(store, snapshots, kind, id, organizations, from, to),
      checkpoint: (organizationId, organizations, size) => getCheckpoint(pool, organizationId, organizations, size),
      recordProof: (kind, id, organizations, size) => recordProof(pool, store, kind, id, organizations, size),
      consistencyProof: (organizationId, organizations, fromSize, toSize) =>
        consistencyProof(pool, organizationId, organizations, fromSize, toSize),
      listChanges: createChangeFeed(pool, progress),
    };

    const webhookStore = new WebhookStore(
      pool,
      () => `wh_${nanoid()}`,
      () => dispatcher.webhookEnabled(),
    );
    const webhooks: Webhooks = Object.assign(
      Object.fromEntries(
        (['create', 'get', 'list', 'update', 'remove', 'rotate', 'deliveries', 'redeliver'] as const).map((name) => [
          name,
          webhookStore[name].bind(webhookStore),
        ]),
      ) as Omit<Webhooks, 'targetProblem'>,
      { targetProblem: (url: string) => targetProblem(url, config.webhooks.allowPrivateTargets) },
    );
    const dispatcher = new DeliveryThread({
      anyWebhook: () => anyWebhookEnabled(pool),
      databaseUrl,
      settings: config.webhooks,
      nice: config.webhooks.deliveryNice,
      logLevel: config.logLevel,
      progress,
      logger: logger.child({ component: 'webhooks' }),
      observer: {
        onAttempt: (outcome, seconds) => {
          metrics.webhookAttempts.inc({ outcome });
          metrics.webhookAttemptDuration.observe(seconds);
        },
        onDelivered: (seconds) => metrics.webhookDeliveryLatency.observe(seconds),
      },
    });
    metrics.webhookOldestPending = () => oldestPendingSeconds(pool);

    const readiness = () => checkReadiness({ store, pool, progress, projectionWaitMs: config.projectionWaitMs });
    metrics.watch({
      readiness,
      projectionLag: () => measureProjectionLag(store, progress, projectionLagProbeLimit),
      projectionBacklog: () => measureBacklog(store, progress),
      cascadeBacklog: () => cascade.pendingCount(),
      deadLetters: () => deadLetterCounts(pool),
    });

    const idempotency = new IdempotencyKeys(
      pool,
      () => listener.session,
      (error, what) => logger.warn({ err: error.message }, what),
    );
    listener.onReconnect(() =>
      idempotency.reattach().catch((error: unknown) => logger.warn({ err: (error as Error).message }, claimsNotMoved)),
    );

    // Started once nothing above can fail: a start-up that fails leaves no loop behind on the closed stores.
    if (options.runProjector ?? true) projector.start();
    if ((options.runTreeKeeper ?? true) && !config.audit.benchWithoutIntegrity) treeKeeper.start();
    if (options.deliverWebhooks ?? true) dispatcher.start();

    return {
      services: {
        verifyToken: createTokenVerifier(auth),
        idempotency,
        commands,
        queries,
        webhooks,
        readiness,
        metrics,
        auditKeys: () => auditKeys(pool),
      },
      auth,
      databaseUrl,
      pool,
      store,
      projector,
      progress,
      cascade,
      treeKeeper,
      dispatcher,
      close: async (onStep = () => undefined) => {
        onStep('stopping the integrity tree keeper');
        await treeKeeper.stop();
        onStep('stopping webhook delivery');
        await dispatcher.stop();
        onStep('stopping the projector (its batch in progress)');
        await projector.stop();
        onStep('stopping the cascade worker');
        await cascade.close();
        progress.close();
        onStep(config.databaseUrl ? 'closing the stores' : 'closing the stores and stopping the embedded PostgreSQL');
        await stores.close();
      },
    };
  } catch (error) {
    await stores.close();
    throw error;
  }
}

/**
 * The app on a runtime, with the options the config gives it: the one mapping from config to app
 * the service, the tests and the bench share (a bench may override one, such as the rate limit).
 */
export function buildServiceApp(config: Config, runtime: Runtime, logger: Logger, overrides: Partial<AppOptions> = {}) {
  return buildApp({
    services: runtime.services,
    logger,
    bodyLimitBytes: config.bodyLimitBytes,
    requestTimeoutMs: config.requestTimeoutMs,
    rateLimitPerMinute: config.rateLimitPerMinute,
    changeStreamsPerCaller: config.changeStreamsPerCaller,
    changeStreamHeartbeatMs: config.changeStreamHeartbeatMs,
    shutdownDrainMs: config.shutdownDrainMs,
    serveMetrics: config.metrics.port === undefined,
    ...overrides,
  });
}
