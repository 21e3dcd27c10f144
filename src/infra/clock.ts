import { fromMicros, type Timestamp } from '../domain/timestamp.js';

/**
 * Wall-clock time with microsecond resolution that never goes backwards within the process, so
 * that records created later in one instance never sort before earlier ones (contract §9).
 */
export function createClock(): () => Timestamp {
  let last = 0n;
  return () => {
    const micros = BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000));
    last = micros > last ? micros : last + 1n;
    return fromMicros(last);
  };
}
