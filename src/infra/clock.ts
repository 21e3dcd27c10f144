import { fromMicros, type Timestamp } from '../domain/timestamp.js';

/** How far the wall clock must be from the count to be taken as stepped. */
const steppedByMs = 20;

/**
 * Wall-clock time with microsecond resolution that never goes backwards within the process, so
 * that records created later in one instance never sort before earlier ones (contract §9).
 * The microseconds come from the monotonic clock, counted from an origin on the wall clock; the
 * wall clock is read at every call, and when it has been stepped away from that count (an NTP
 * correction, a virtual machine resumed after a pause) the origin moves to it. A step backwards
 * then holds readings a microsecond apart until the wall clock passes the last one.
 */
export function createClock(): () => Timestamp {
  let origin = performance.timeOrigin;
  let last = 0n;
  return () => {
    const wall = Date.now();
    const elapsed = performance.now();
    // Smaller differences are the two reads' own (the millisecond Date.now() truncates, a thread
    // paused between them); a stepped clock is off by more (NTP slews offsets below 128 ms).
    if (Math.abs(origin + elapsed - wall) > steppedByMs) origin = wall - elapsed;
    const micros = BigInt(Math.round((origin + elapsed) * 1000));
    last = micros > last ? micros : last + 1n;
    return fromMicros(last);
  };
}
