import type { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { FeedProgress } from '../../changes/adapters/feed.js';
import { comparePositions, type GlobalPosition } from '../../eventstore/port.js';
import { startWorkerBeside } from '../../infra/worker-thread.js';
import type { AttemptOutcome } from '../schedule.js';
import type { DispatcherObserver, DispatcherSettings } from './dispatcher.js';

/** What the delivery thread starts with. */
export type DeliveryThreadData = {
  databaseUrl: string;
  settings: DispatcherSettings;
  nice: number;
  logLevel: string;
  pollMs: number;
  position: GlobalPosition;
};
export type ToDeliveryThread = { type: 'progress'; position: GlobalPosition } | { type: 'sweep' } | { type: 'stop' };
export type FromDeliveryThread =
  | { type: 'attempt'; outcome: AttemptOutcome | 'retry'; seconds: number }
  | { type: 'delivered'; seconds: number }
  | { type: 'log'; level: string; message: string; fields: object };

export type DeliveryThreadOptions = Omit<DeliveryThreadData, 'position' | 'pollMs'> & {
  progress: FeedProgress;
  observer: DispatcherObserver;
  logger: Logger;
  /** Whether any webhook is enabled: until one is, no thread is started. */
  anyWebhook: () => Promise<boolean>;
  pollMs?: number;
};

/** Until a webhook exists, how often the service looks for one made by another instance. */
const lookForWebhooksMs = 5000;

/**
 * After the thread died (it should not: its rounds catch their own errors), it is started again
 * this much later, twice as long after each death in a row, up to a minute.
 */
const firstRestartMs = 1000;
const longestRestartMs = 60_000;
/** A thread that ran this long before it died starts the backoff again from its beginning. */
const healthyRunMs = 60_000;
/** How long the thread's stop may take past the attempts' timeout before it is ended without waiting. */
const stopGraceMs = 5000;

/**
 * Webhook delivery (src/webhooks/adapters/dispatcher.ts) in a worker thread of its own, at a
 * lower priority: its HTTP attempts and statements never take turns with the API's requests on
 * one event loop, and while the machine is busy the kernel gives the API's thread the CPU first.
 * Deliveries then lag under a peak of writes, and catch up after it; nothing is lost, as the
 * queue is in PostgreSQL. Measured with `npm run bench:changes` (README, docs/production.md).
 */
export class DeliveryThread {
  private worker: Worker | undefined;
  /** Aborted by stop(): nothing starts after it, and the progress stops being forwarded. */
  private readonly stopped = new AbortController();
  private exited: Promise<void> = Promise.resolve();
  private restartMs = firstRestartMs;
  private looking: Promise<void> | undefined;
  private lookNow: () => void = () => undefined;

  constructor(private readonly options: DeliveryThreadOptions) {}

  /**
   * Starts the thread once a webhook is enabled: at once if one is, else when {@link webhookEnabled}
   * says so (this instance made or enabled one) or a periodic look finds one (another instance
   * did). A service with no webhooks spends neither the thread's start (a second of CPU) nor its
   * connections.
   */
  start(): void {
    if (this.looking || this.stopped.signal.aborted) return;
    this.looking = (async () => {
      while (!this.stopped.signal.aborted) {
        try {
          if (await this.options.anyWebhook()) break;
        } catch (error) {
          this.options.logger.warn({ err: (error as Error).message }, 'could not look for webhooks; looking again');
        }
        await new Promise<void>((resolve) => {
          this.lookNow = resolve;
          // A stop while the look was out came before this wait: it must not wait out the interval.
          if (this.stopped.signal.aborted) resolve();
          else setTimeout(resolve, lookForWebhooksMs).unref();
        });
      }
      if (this.stopped.signal.aborted) return;
      this.spawn();
      void this.forwardProgress();
    })();
  }

  /**
   * A webhook was created or enabled here: the thread starts now if it had not, and if it had, it
   * sweeps now, making the deliveries parked while the webhook was disabled due (a thread that
   * starts sweeps in its first round anyway).
   */
  webhookEnabled(): void {
    this.lookNow();
    this.worker?.postMessage({ type: 'sweep' } satisfies ToDeliveryThread);
  }

  /** Lets the thread's attempts out finish and be recorded, as the dispatcher's stop does, then ends it. */
  async stop(): Promise<void> {
    this.stopped.abort();
    this.lookNow();
    await this.looking;
    const worker = this.worker;
    if (!worker) return;
    worker.postMessage({ type: 'stop' } satisfies ToDeliveryThread);
    const deadline = setTimeout(() => void worker.terminate(), this.options.settings.timeoutMs + stopGraceMs);
    await this.exited;
    clearTimeout(deadline);
  }

  private spawn(): void {
    const data: DeliveryThreadData = {
      databaseUrl: this.options.databaseUrl,
      settings: this.options.settings,
      nice: this.options.nice,
      logLevel: this.options.logLevel,
      pollMs: this.options.pollMs ?? 500,
      position: this.options.progress.current,
    };
    const worker = startWorkerBeside(import.meta.url, 'delivery-worker', data);
    this.worker = worker;
    worker.on('message', (message: FromDeliveryThread) => this.receive(message));
    worker.on('error', (error) => this.options.logger.error({ err: error }, 'webhook delivery thread failed'));
    worker.on('messageerror', (error) => this.options.logger.error({ err: error }, 'a message from the webhook delivery thread was lost'));
    const started = performance.now();
    this.exited = new Promise((resolve) =>
      worker.once('exit', (code) => {
        resolve();
        if (this.stopped.signal.aborted) return;
        this.restartMs = performance.now() - started >= healthyRunMs ? firstRestartMs : this.restartMs;
        this.options.logger.error({ code }, `webhook delivery thread ended; starting it again in ${this.restartMs} ms`);
        setTimeout(() => {
          if (!this.stopped.signal.aborted) this.spawn();
        }, this.restartMs).unref();
        this.restartMs = Math.min(this.restartMs * 2, longestRestartMs);
      }),
    );
  }

  private receive(message: FromDeliveryThread): void {
    switch (message.type) {
      case 'attempt':
        this.options.observer.onAttempt?.(message.outcome, message.seconds);
        return;
      case 'delivered':
        this.options.observer.onDelivered?.(message.seconds);
        return;
      case 'log': {
        const level = (['fatal', 'error', 'warn', 'info', 'debug', 'trace'] as const).find((name) => name === message.level) ?? 'info';
        this.options.logger[level](message.fields, message.message);
        return;
      }
      default:
        message satisfies never;
    }
  }

  /** Tells the thread each time the projection moves (it waits for that between rounds, as the feed's readers do). */
  private async forwardProgress(): Promise<void> {
    const { progress } = this.options;
    const { signal } = this.stopped;
    let told = progress.current;
    while (!signal.aborted) {
      await progress.waitPast(told, 1000, signal);
      if (comparePositions(progress.current, told) <= 0) continue;
      told = progress.current;
      this.worker?.postMessage({ type: 'progress', position: told } satisfies ToDeliveryThread);
    }
  }
}
