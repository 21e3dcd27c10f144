import os from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { pino } from 'pino';
import type { FeedProgress } from '../../changes/adapters/feed.js';
import { comparePositions, type GlobalPosition } from '../../eventstore/port.js';
import { createPool } from '../../infra/postgres.js';
import { PositionWaits } from '../../projections/position-waits.js';
import { WebhookDispatcher } from './dispatcher.js';
import type { DeliveryThreadData, FromDeliveryThread, ToDeliveryThread } from './delivery-thread.js';

/**
 * The webhook delivery thread's entry (src/webhooks/adapters/delivery-thread.ts): a dispatcher with
 * a pool of its own, told of the projection's progress by the service's thread, its outcomes and
 * log lines sent back there.
 */

const port = parentPort!;
const data = workerData as DeliveryThreadData;
const post = (message: FromDeliveryThread) => port.postMessage(message);

// On Linux a thread has its own nice value: this one, not the API's thread, yields when the machine is busy.
try {
  os.setPriority(0, data.nice);
} catch (error) {
  // Some platforms refuse; delivery then runs at the API's priority, which only costs the API some CPU.
  post({ type: 'log', level: 'warn', message: 'webhook delivery thread priority not set', fields: { err: (error as Error).message } });
}

/** Log lines go to the service's logger, so that they look and go where its own do. */
const logger = pino(
  { level: data.logLevel, base: undefined, timestamp: false },
  {
    write(line: string) {
      const { level, msg, ...fields } = JSON.parse(line) as { level: number; msg?: string };
      post({ type: 'log', level: pino.levels.labels[level] ?? 'info', message: msg ?? '', fields });
    },
  },
);

/** The projection's progress as the service's thread last told it. */
class ForwardedProgress implements FeedProgress {
  private readonly waits = new PositionWaits();

  constructor(public current: GlobalPosition) {}

  moveTo(position: GlobalPosition): void {
    if (comparePositions(position, this.current) <= 0) return;
    this.current = position;
    this.waits.reach(position);
  }

  waitPast(position: GlobalPosition, timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
    if (comparePositions(this.current, position) > 0) return Promise.resolve(true);
    return this.waits.waitPast(position, timeoutMs, signal);
  }
}

const progress = new ForwardedProgress(data.position);
const pool = createPool(data.databaseUrl, logger, 4);
const dispatcher = new WebhookDispatcher(
  pool,
  progress,
  data.settings,
  logger,
  {
    onAttempt: (outcome, seconds) => post({ type: 'attempt', outcome, seconds }),
    onDelivered: (seconds) => post({ type: 'delivered', seconds }),
  },
  data.pollMs,
);
dispatcher.start();

port.on('message', (message: ToDeliveryThread) => {
  if (message.type === 'progress') {
    progress.moveTo(message.position);
  } else if (message.type === 'sweep') {
    dispatcher.sweepSoon();
  } else if (message.type === 'stop') {
    void (async () => {
      // Each step is taken whatever the one before did: what was leased and not recorded is
      // attempted again once its lease runs out.
      const stopped = (step: string) => (error: unknown) =>
        logger.warn({ err: (error as Error).message, step }, 'the delivery thread stopped uncleanly');
      await dispatcher.stop().catch(stopped('dispatcher'));
      await pool.end().catch(stopped('pool'));
      // The thread ends once nothing is left to run; closing the port is the last thing.
      port.close();
    })();
  }
});
