import { comparePositions, encodePosition, startOfLog, type EventStore, type GlobalPosition } from '../eventstore/port.js';
import type { Pool } from '../infra/postgres.js';
import { readinessParts, type ProjectionBacklog, type Readiness } from '../observability/readiness.js';
import { blockingDeadLetter } from './dead-letters.js';
import type { ProjectionProgress } from './progress.js';

/** How long a probe waits for the projection to reach the log's end it read, at most. */
const probeWaitMs = 1000;

/** Whether an event the projection has to pass lies after its checkpoint, at or before `end`. */
async function eventsUpTo(store: EventStore, progress: ProjectionProgress, end: GlobalPosition): Promise<boolean> {
  const [next] = await store.readAll(progress.current, 1);
  return next !== undefined && comparePositions(next.position, end) <= 0;
}

/**
 * Whether the projection reaches, within `waitMs`, the end of the log as read at the start of the
 * probe: not merely the next event, which a projector catching up passes every few milliseconds
 * while far behind. The log's last event may be one the projector never lands on (another
 * application's, a system event): what counts is that none of the events it has to pass is left.
 */
async function reachesEnd(
  store: EventStore,
  progress: ProjectionProgress,
  end: GlobalPosition | undefined,
  waitMs: number,
): Promise<boolean> {
  if (!end || comparePositions(progress.current, end) >= 0 || !(await eventsUpTo(store, progress, end))) return true;
  return (await progress.waitFor(end, waitMs, { stallOnTimeout: false })) || !(await eventsUpTo(store, progress, end));
}

const endsBefore = (end: GlobalPosition | undefined, checkpoint: GlobalPosition) => comparePositions(end ?? startOfLog, checkpoint) < 0;

/**
 * Whether the log, which ended at `end` when read, ends before `checkpoint`: read again a moment
 * later before it is believed, since the PostgreSQL store's visible end can fall back for an
 * instant (a transaction that ended between its two reads still bounds it). The end read then.
 */
async function endBeforeCheckpoint(
  store: EventStore,
  checkpoint: GlobalPosition,
  end: GlobalPosition | undefined,
): Promise<{ end: GlobalPosition | undefined } | undefined> {
  if (!endsBefore(end, checkpoint)) return undefined;
  await new Promise((resolve) => setTimeout(resolve, confirmEndMs));
  const again = await store.readLastPosition();
  return endsBefore(again, checkpoint) ? { end: again } : undefined;
}

/** How long after a log's end read before the checkpoint it is read again. */
const confirmEndMs = 250;

/** The events from the projection's checkpoint to `end`, and the seconds they take at its recent rate (NaN: no rate yet). */
function backlogTo(store: EventStore, progress: ProjectionProgress, end: GlobalPosition | undefined): ProjectionBacklog {
  const events = !end || comparePositions(progress.current, end) >= 0 ? 0 : store.estimateEventsBetween(progress.current, end);
  progress.noteBacklog(events);
  if (!end || events === 0) return { events: 0, catchUpSeconds: 0 };
  return { events, catchUpSeconds: progress.secondsToReach(end) ?? NaN };
}

/**
 * How far behind the log's end the projection is: the events still to apply (as the store
 * estimates them) and the seconds they take at the rate the projection has moved at lately
 * (NaN while it has not moved: stopped, or just started). None when no event it has to pass is
 * left, though the log ends later with events it never lands on (EventStoreDB's `$all` holds other
 * programs' and system events), as readiness counts it.
 */
export async function measureBacklog(store: EventStore, progress: ProjectionProgress): Promise<ProjectionBacklog> {
  await progress.refresh();
  const end = await store.readLastPosition();
  const nothingToPass = end !== undefined && comparePositions(progress.current, end) < 0 && !(await eventsUpTo(store, progress, end));
  return backlogTo(store, progress, nothingToPass ? undefined : end);
}

/**
 * `/readyz` (contract §13): ready when the event store and the read database answer and the
 * projection has reached, within a second, the log's end as read at the probe. Behind, the checks
 * carry the backlog in events and the estimated seconds to catch up (null while there is no rate
 * to go by). A command that gave up waiting also makes it not ready until the projection passes
 * its events; so does a projector stopped at an event it cannot apply, which `dead_letter` names.
 */
export async function checkReadiness(options: {
  store: EventStore;
  pool: Pool;
  progress: ProjectionProgress;
  projectionWaitMs: number;
}): Promise<Readiness> {
  const { store, pool, progress } = options;
  const checks: Readiness['checks'] = {};
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
      // The log's end as read now: what the projection must reach, and what a backlog is counted to.
      await progress.refresh();
      const checkpoint = progress.current;
      const end = await store.readLastPosition();
      const replaced = await endBeforeCheckpoint(store, checkpoint, end);
      if (replaced) {
        // Positions of another log: the projection can never reach them, and a command's events,
        // placed before the checkpoint, would read as applied though they never will be.
        checks.projection = 'stopped';
        checks.event_log =
          `the log ends at ${replaced.end ? encodePosition(replaced.end) : 'its start'}, before the projection's checkpoint ` +
          `${encodePosition(checkpoint)}: the event store was replaced or emptied under the read database; ` +
          'point the service back at its event store, or at a fresh read database to project this one from its start';
        return { ready: false, checks };
      }
      const caughtUp = !progress.stalled && (await reachesEnd(store, progress, end, Math.min(options.projectionWaitMs, probeWaitMs)));
      if (caughtUp) checks.projection = 'caught_up';
      else {
        const backlog = backlogTo(store, progress, end);
        checks.projection = 'behind';
        checks.projection_backlog_events = backlog.events;
        checks.projection_catch_up_seconds = Number.isFinite(backlog.catchUpSeconds) ? Math.ceil(backlog.catchUpSeconds) : null;
      }
    }
  }
  const passed = (value: unknown) => value === 'ok' || value === 'caught_up';
  return { ready: readinessParts.every((name) => passed(checks[name])), checks };
}
