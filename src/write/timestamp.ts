/**
 * Timestamps travel as strings in the contract's exact form (§8), `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
 * That form sorts lexicographically in time order, so comparisons need no parsing.
 */
export type Timestamp = string;

const timestampPattern = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{6})Z$/;

export function isTimestamp(value: string): boolean {
  const match = timestampPattern.exec(value);
  if (!match) return false;
  const millis = Date.parse(`${value.slice(0, 23)}Z`);
  // Date.parse accepts e.g. Feb 30 by rolling over; a round-trip rejects such dates.
  return !Number.isNaN(millis) && new Date(millis).toISOString().slice(0, 19) === value.slice(0, 19);
}

export function toMicros(timestamp: Timestamp): bigint {
  const millis = BigInt(Date.parse(`${timestamp.slice(0, 19)}Z`));
  return millis * 1000n + BigInt(timestamp.slice(20, 26));
}

export function fromMicros(micros: bigint): Timestamp {
  const seconds = micros / 1_000_000n;
  const fraction = (micros % 1_000_000n).toString().padStart(6, '0');
  return `${new Date(Number(seconds) * 1000).toISOString().slice(0, 19)}.${fraction}Z`;
}

/** The later of `now` and one microsecond after `previous`: a record's changes are strictly ordered in time. */
export function nextTimestamp(now: Timestamp, previous: Timestamp | undefined): Timestamp {
  if (previous === undefined || now > previous) return now;
  return fromMicros(toMicros(previous) + 1n);
}
