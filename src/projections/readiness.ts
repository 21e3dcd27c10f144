import { readPage } from '../eventstore/event-log.js';
import { encodePosition, type EventStore } from '../eventstore/port.js';
import type { Pool } from '../infra/postgres.js';
import type { Readiness } from '../observability/readiness.js';
import { blockingDeadLetter } from './dead-letters.js';
import type { ProjectionProgress } from './progress.js';

/**
 * `/readyz` (contract §13): ready when the event store and the read database answer and the
 * projection is caught up. Behind is normal for a moment under load; behind for longer than a
 * command would wait (at most a second here), or after a command gave up waiting, is not; nor is
 * a projector stopped at an event it cannot apply, which `dead_letter` names.
 */
export async function checkReadiness(options: {
  store: EventStore;
  pool: Pool;
  progress: ProjectionProgress;
  projectionWaitMs: number;
}): Promise<Readiness> {
  const { store, pool, progress } = options;
  const checks: Record<string, string> = {};
  const probe = async (name: string, work: () => Promise<unknown>) => {
    try {
      await work();
      checks[name] = 'ok';
    } catch {
      // The failure is the answer: `unreachable` in the check, 503 from /readyz.
      checks[name] = 'unreachable';
    }
  };
  await Promise.all([probe('event_store', () => store.ping()), probe('read_database', () => pool.query('SELECT 1'))]);
  if (checks.event_store === 'ok' && checks.read_database === 'ok') {
    const deadLetter = await blockingDeadLetter(pool);
    if (deadLetter) {
      checks.projection = 'stopped';
      checks.dead_letter =
        `projector stopped at ${deadLetter.streamName} version ${deadLetter.version} (${deadLetter.type}, position ` +
        `${encodePosition(deadLetter.position)}): ${deadLetter.error}; see npm run projections:dead-letters -- list`;
    } else {
      await progress.refresh();
      const { end, unreadable } = await readPage(store, progress.current, 1);
      const next = end ?? unreadable?.event.position;
      const caughtUp = !progress.stalled && (!next || (await progress.waitFor(next, Math.min(options.projectionWaitMs, 1000))));
      checks.projection = caughtUp ? 'caught_up' : 'behind';
    }
  }
  return { ready: Object.values(checks).every((value) => value === 'ok' || value === 'caught_up'), checks };
}
