import pg from 'pg';
import { pino } from 'pino';
import { buildApp } from '../../../src/api/app.js';
import { createTokenVerifier } from '../../../src/api/auth.js';
import { IdempotencyKeys } from '../../../src/api/idempotency.js';
import type { Queries, Webhooks } from '../../../src/api/operations.js';
import { mintToken, type TokenClaims } from '../../../src/api/tokens.js';
import { InMemoryEventStore } from '../../../src/eventstore/in-memory.js';
import { createClock } from '../../../src/infra/clock.js';
import { Metrics } from '../../../src/observability/metrics.js';
import { CascadeWorker } from '../../../src/write/cascade.js';
import { CommandHandlers } from '../../../src/write/handlers.js';
import type { RecordQueues } from '../../../src/write/record-queue.js';

const secret = 'unit-test-secret-that-is-long-enough!!';

export type InMemoryApp = {
  app: Awaited<ReturnType<typeof buildApp>>;
  store: InMemoryEventStore;
  /** How many commands wait their turn on a record's stream, not counting the group being run. */
  waitingOn: (streamName: string) => number;
  /** A token for `org_unit` with every scope unless `options` say otherwise. */
  token: (options?: Partial<TokenClaims>) => Promise<string>;
  close: () => Promise<void>;
};

/**
 * The app for `app.inject`, on the in-memory event store: no database, no port. Commands run for
 * real and answer without waiting for a projection; reads answer from `queries` (none by default).
 */
export async function startInMemoryApp(
  options: { queries?: Partial<Queries>; bodyLimitBytes?: number; recordQueueLimit?: number } = {},
): Promise<InMemoryApp> {
  const logger = pino({ level: 'silent' });
  // Never connected: nothing the unit tests send needs idempotency keys or the cascade's table.
  const unusedPool = new pg.Pool({ connectionString: 'postgresql://unused@127.0.0.1:1/unused' });
  const store = new InMemoryEventStore();
  let newIds = 0;
  const commands = new CommandHandlers({
    store,
    cascade: new CascadeWorker(store, unusedPool, logger),
    clock: createClock(),
    newId: (prefix) => `${prefix}${String(++newIds).padStart(21, '0')}`,
    awaitProjection: async () => undefined,
    projectionWaitMs: 1000,
    logger,
    recordQueueLimit: options.recordQueueLimit ?? 256,
  });
  const app = await buildApp({
    services: {
      verifyToken: createTokenVerifier({ kind: 'secret', secret }),
      idempotency: new IdempotencyKeys(unusedPool, () => undefined),
      commands,
      queries: (options.queries ?? {}) as Queries,
      // No webhook operation is sent here: they need PostgreSQL (test/e2e/webhooks.e2e.test.ts).
      webhooks: {} as Webhooks,
      readiness: async () => ({ ready: true, checks: {} }),
      metrics: new Metrics(),
      auditKeys: async () => ({ keys: [] }),
    },
    logger,
    bodyLimitBytes: options.bodyLimitBytes ?? 1024 * 1024,
    rateLimitPerMinute: 0,
    serveMetrics: true,
  });
  return {
    app,
    store,
    // The handlers' own queues, which the service has no reason to show: a test's view of their inside.
    waitingOn: (streamName) => (commands as unknown as { queues: RecordQueues<never> }).queues.waitingOn(streamName),
    token: (overrides = {}) => mintToken(secret, { subject: 'unit-user', organizations: ['org_unit'], ...overrides }),
    close: async () => {
      await app.close();
      await unusedPool.end();
    },
  };
}
