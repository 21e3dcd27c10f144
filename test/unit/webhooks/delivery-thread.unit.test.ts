import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { DeliveryThread } from '../../../src/webhooks/adapters/delivery-thread.js';

describe('the webhook delivery thread before any webhook exists', () => {
  it('given a stop while it is looking for webhooks, stops without waiting for its next look (5 s later)', async () => {
    let looks = 0;
    let lookAnswered = () => undefined as void;
    const thread = new DeliveryThread({
      databaseUrl: 'postgresql://unused',
      settings: { timeoutMs: 1000, retrySchedule: [], disableAfterMs: 1000, allowPrivateTargets: false },
      nice: 0,
      logLevel: 'silent',
      progress: { current: { commit: 0n, prepare: 0n } } as never,
      observer: {},
      logger: pino({ level: 'silent' }),
      // The look is out when the stop comes: it answers "none" only after.
      anyWebhook: () => {
        looks += 1;
        return new Promise<boolean>((resolve) => (lookAnswered = () => resolve(false)));
      },
    });
    thread.start();
    await new Promise((resolve) => setImmediate(resolve));
    expect(looks).toBe(1);
    const stopping = thread.stop();
    lookAnswered();
    const outcome = await Promise.race([
      stopping.then(() => 'stopped'),
      new Promise((resolve) => setTimeout(() => resolve('waiting'), 2000)),
    ]);
    expect(outcome).toBe('stopped');
    expect(looks).toBe(1);
  });
});
