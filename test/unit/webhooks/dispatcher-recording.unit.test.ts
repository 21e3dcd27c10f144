import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { WebhookDispatcher } from '../../../src/webhooks/adapters/dispatcher.js';

/**
 * The dispatcher's recording of outcomes (WebhookDispatcher.recordWaiting): one statement at a
 * time, those that finish meanwhile going in the next. Its statement is replaced here by a list,
 * so that the moment an outcome arrives can be set to the microtask.
 */
describe('the webhook dispatcher recording outcomes', () => {
  const settings = { timeoutMs: 1000, retrySchedule: [], disableAfterMs: 1000, allowPrivateTargets: false };
  const microtasks = async (count: number) => {
    for (let turn = 0; turn < count; turn++) await Promise.resolve();
  };

  it('given an outcome that arrives just as the previous statement has been written, records it without waiting for another', async () => {
    for (let delay = 0; delay < 12; delay++) {
      const dispatcher = new WebhookDispatcher(undefined as never, undefined as never, settings, pino({ level: 'silent' }));
      const internals = dispatcher as unknown as { outcomes: string[]; recordWaiting(): void; record(outcomes: string[]): Promise<void> };
      const recorded: string[] = [];
      let written = () => undefined as void;
      internals.record = async (outcomes) => {
        recorded.push(...outcomes);
        await new Promise<void>((resolve) => (written = resolve));
      };
      internals.outcomes.push('first');
      internals.recordWaiting();
      written();
      await microtasks(delay);
      internals.outcomes.push('second');
      internals.recordWaiting();
      await new Promise((resolve) => setTimeout(resolve, 5));
      written();
      await new Promise((resolve) => setTimeout(resolve, 5));
      expect({ delay, recorded }).toEqual({ delay, recorded: ['first', 'second'] });
      await dispatcher.stop();
    }
  });
});
