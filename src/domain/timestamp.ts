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

/**
 * Any RFC 3339 instant (`T` or `t`, `Z`, `z` or a numeric offset, 0 to 6 fractional digits) in the
 * contract's form, in UTC; undefined if it is not one. An instant that falls outside years
 * 0000–9999 once its offset is applied is clamped to the nearest end: it is before, or after,
 * every change a record can have, and is treated as such.
 */
export function parseInstant(text: string): Timestamp | undefined {
  const match = /^(\d{4}-\d{2}-\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/.exec(text);
  if (!match) return undefined;
  const [, date, hours, minutes, seconds, fraction = '', zulu, sign, offsetHours = '00', offsetMinutes = '00'] = match;
  if (Number(hours) > 23 || Number(minutes) > 59 || Number(seconds) > 60 || Number(offsetHours) > 23 || Number(offsetMinutes) > 59)
    return undefined;
  // A leap second (:60, which RFC 3339 allows) reads as the last microsecond of its minute.
  const leap = seconds === '60';
  const local = `${date}T${hours}:${minutes}:${leap ? '59' : seconds}.${leap ? '999999' : fraction.padEnd(6, '0')}Z`;
  if (!isTimestamp(local)) return undefined;
  const offsetMicros = zulu ? 0n : (sign === '-' ? -1n : 1n) * BigInt(Number(offsetHours) * 60 + Number(offsetMinutes)) * 60_000_000n;
  const utc = toMicros(local) - offsetMicros;
  return fromMicros(utc < firstMicros ? firstMicros : utc > lastMicros ? lastMicros : utc);
}

export function toMicros(timestamp: Timestamp): bigint {
  const millis = BigInt(Date.parse(`${timestamp.slice(0, 19)}Z`));
  return millis * 1000n + BigInt(timestamp.slice(20, 26));
}

export function fromMicros(micros: bigint): Timestamp {
  // Floor division: before 1970 the seconds round down and the fraction stays positive.
  const seconds = micros >= 0n ? micros / 1_000_000n : -((-micros + 999_999n) / 1_000_000n);
  const fraction = (micros - seconds * 1_000_000n).toString().padStart(6, '0');
  return `${new Date(Number(seconds) * 1000).toISOString().slice(0, 19)}.${fraction}Z`;
}

/** The later of `now` and one microsecond after `previous`: a record's changes are strictly ordered in time. */
export function nextTimestamp(now: Timestamp, previous: Timestamp | undefined): Timestamp {
  if (previous === undefined || now > previous) return now;
  return fromMicros(toMicros(previous) + 1n);
}

const firstMicros = toMicros('0000-01-01T00:00:00.000000Z');
const lastMicros = toMicros('9999-12-31T23:59:59.999999Z');
