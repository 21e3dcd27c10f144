/**
 * When a failed delivery is tried again (contract §15): after each failed attempt the next delay
 * of the schedule (WEBHOOK_RETRY_SCHEDULE, src/config.ts), ±20 % jitter, and once the schedule is
 * spent the delivery is `failed`.
 */

/**
 * The delay before the attempt after `attempts` failed ones, or undefined when none is left.
 * `random` in [0, 1) picks the jitter. `lateMs` is how long after its due time a delivery may wait
 * to be taken up (the dispatcher's idle poll): the delay is drawn from 80 % of the schedule's up to
 * 120 % less that, never below 80 %, so that the attempt itself lands within the ±20 %.
 */
export function retryDelay(schedule: readonly number[], attempts: number, random: number, lateMs = 0): number | undefined {
  const base = schedule[attempts - 1];
  if (base === undefined) return undefined;
  const earliest = 0.8 * base;
  const latest = Math.max(earliest, 1.2 * base - lateMs);
  return Math.round(earliest + (latest - earliest) * random);
}

/** What an attempt's answer means: success is a 2xx; 410 Gone disables the webhook; anything else (redirects included) fails. */
export type AttemptOutcome = 'succeeded' | 'gone' | 'failed';

export function outcomeOf(status: number | undefined): AttemptOutcome {
  if (status === undefined) return 'failed';
  if (status >= 200 && status < 300) return 'succeeded';
  return status === 410 ? 'gone' : 'failed';
}
