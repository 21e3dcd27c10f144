/**
 * When a failed delivery is tried again (contract §15): after each failed attempt the next delay
 * of the schedule (WEBHOOK_RETRY_SCHEDULE, src/config.ts), ±20 % jitter, and once the schedule is
 * spent the delivery is `failed`.
 */

/**
 * The delay before the attempt after `attempts` failed ones, or undefined when none is left.
 * `random` in [0, 1) picks the jitter.
 */
export function retryDelay(schedule: readonly number[], attempts: number, random: number): number | undefined {
  const base = schedule[attempts - 1];
  if (base === undefined) return undefined;
  return Math.round(base * (0.8 + 0.4 * random));
}

/** What an attempt's answer means: success is a 2xx; 410 Gone disables the webhook; anything else (redirects included) fails. */
export type AttemptOutcome = 'succeeded' | 'gone' | 'failed';

export function outcomeOf(status: number | undefined): AttemptOutcome {
  if (status === undefined) return 'failed';
  if (status >= 200 && status < 300) return 'succeeded';
  return status === 410 ? 'gone' : 'failed';
}
