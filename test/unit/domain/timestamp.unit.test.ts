import { describe, expect, it } from 'vitest';
import { fromMicros, isTimestamp, nextTimestamp, parseInstant, toMicros } from '../../../src/domain/timestamp.js';

describe('isTimestamp', () => {
  it.each([
    '2024-05-01T10:00:00.000000Z',
    '2024-02-29T23:59:59.999999Z', // leap day
    '2000-02-29T00:00:00.000000Z', // divisible by 400
    '1970-01-01T00:00:00.000000Z',
    '9999-12-31T23:59:59.999999Z',
    '2024-12-31T00:00:00.123456Z',
  ])('accepts %s', (value) => {
    expect(isTimestamp(value)).toBe(true);
  });

  it.each([
    ['2024-02-30T00:00:00.000000Z', 'February 30'],
    ['2023-02-29T00:00:00.000000Z', 'February 29 outside a leap year'],
    ['1900-02-29T00:00:00.000000Z', 'February 29 in a century that is not a leap year'],
    ['2024-04-31T00:00:00.000000Z', 'April 31'],
    ['2024-13-01T00:00:00.000000Z', 'month 13'],
    ['2024-00-10T00:00:00.000000Z', 'month 0'],
    ['2024-01-00T00:00:00.000000Z', 'day 0'],
    ['2024-01-01T24:00:00.000000Z', 'hour 24'],
    ['2024-01-01T23:60:00.000000Z', 'minute 60'],
    ['2024-01-01T23:59:60.000000Z', 'second 60'],
    ['2024-05-01T10:00:00.00000Z', 'five fractional digits'],
    ['2024-05-01T10:00:00.0000000Z', 'seven fractional digits'],
    ['2024-05-01T10:00:00.000Z', 'milliseconds'],
    ['2024-05-01T10:00:00Z', 'no fraction'],
    ['2024-05-01T10:00:00.000000', 'no zone'],
    ['2024-05-01T10:00:00.000000+00:00', 'an offset instead of Z'],
    ['2024-05-01T10:00:00.000000z', 'lower-case z'],
    ['2024-05-01 10:00:00.000000Z', 'a space instead of T'],
    ['2024-5-1T10:00:00.000000Z', 'unpadded fields'],
    [' 2024-05-01T10:00:00.000000Z', 'leading space'],
    ['', 'empty'],
  ])('rejects %s (%s)', (value) => {
    expect(isTimestamp(value)).toBe(false);
  });
});

describe('toMicros and fromMicros', () => {
  it('count microseconds since the epoch', () => {
    expect(toMicros('1970-01-01T00:00:00.000000Z')).toBe(0n);
    expect(toMicros('1970-01-01T00:00:01.000001Z')).toBe(1_000_001n);
    expect(toMicros('2024-05-01T10:00:00.123456Z')).toBe(BigInt(Date.UTC(2024, 4, 1, 10)) * 1000n + 123_456n);
  });

  it('format with exactly six fractional digits', () => {
    expect(fromMicros(0n)).toBe('1970-01-01T00:00:00.000000Z');
    expect(fromMicros(7n)).toBe('1970-01-01T00:00:00.000007Z');
    expect(fromMicros(1_000_000n)).toBe('1970-01-01T00:00:01.000000Z');
  });

  it.each(['2024-05-01T10:00:00.000000Z', '2024-02-29T23:59:59.999999Z', '1999-12-31T23:59:59.000001Z', '2038-01-19T03:14:08.500000Z'])(
    'round-trip %s',
    (value) => {
      const formatted = fromMicros(toMicros(value));
      expect(formatted).toBe(value);
      expect(isTimestamp(formatted)).toBe(true);
    },
  );

  it('keep time order in lexicographic order', () => {
    const values = [0n, 999_999n, 1_000_000n, 86_400_000_000n, 1_714_557_600_000_000n].map(fromMicros);
    expect([...values].sort()).toEqual(values);
  });
});

describe('nextTimestamp', () => {
  const t = '2024-05-01T10:00:00.000000Z';

  it('is now when there is no previous change', () => {
    expect(nextTimestamp(t, undefined)).toBe(t);
  });

  it('is now when now is after the previous change', () => {
    expect(nextTimestamp('2024-05-01T10:00:00.000001Z', t)).toBe('2024-05-01T10:00:00.000001Z');
  });

  it('is one microsecond after the previous change when now equals it', () => {
    expect(nextTimestamp(t, t)).toBe('2024-05-01T10:00:00.000001Z');
  });

  it('is one microsecond after the previous change when now is earlier', () => {
    expect(nextTimestamp('2024-05-01T09:00:00.000000Z', t)).toBe('2024-05-01T10:00:00.000001Z');
  });

  it('carries over seconds, days and years', () => {
    const early = '2000-01-01T00:00:00.000000Z';
    expect(nextTimestamp(early, '2024-05-01T10:00:00.999999Z')).toBe('2024-05-01T10:00:01.000000Z');
    expect(nextTimestamp(early, '2024-05-01T23:59:59.999999Z')).toBe('2024-05-02T00:00:00.000000Z');
    expect(nextTimestamp(early, '2024-02-28T23:59:59.999999Z')).toBe('2024-02-29T00:00:00.000000Z');
    expect(nextTimestamp(early, '2023-02-28T23:59:59.999999Z')).toBe('2023-03-01T00:00:00.000000Z');
    expect(nextTimestamp(early, '2024-12-31T23:59:59.999999Z')).toBe('2025-01-01T00:00:00.000000Z');
  });

  it('is always strictly later than the previous change and well formed', () => {
    const previous = ['2024-05-01T10:00:00.000000Z', '2024-05-01T09:59:59.999999Z', '2024-05-01T10:00:00.000001Z'];
    for (const before of previous) {
      const next = nextTimestamp(t, before);
      expect(next > before).toBe(true);
      expect(next >= t).toBe(true);
      expect(isTimestamp(next)).toBe(true);
    }
  });
});

describe('parseInstant (as_of: any RFC 3339 instant, contract §12)', () => {
  it.each([
    ['2026-11-22T10:00:00Z', '2026-11-22T10:00:00.000000Z'],
    ['2026-11-22T10:00:00.5Z', '2026-11-22T10:00:00.500000Z'],
    ['2026-11-22t11:30:00.123456+01:30', '2026-11-22T10:00:00.123456Z'],
    ['2026-11-22T00:00:00-00:30', '2026-11-22T00:30:00.000000Z'],
    ['2024-02-29T23:59:59.999999-01:00', '2024-03-01T00:59:59.999999Z'],
    ['1969-12-31T23:59:59.5Z', '1969-12-31T23:59:59.500000Z'],
    ['2016-12-31T23:59:60Z', '2016-12-31T23:59:59.999999Z'],
    ['0001-01-01T00:00:00.000001+00:00', '0001-01-01T00:00:00.000001Z'],
    ['0000-01-01T00:00:00+00:01', '0000-01-01T00:00:00.000000Z'],
    ['9999-12-31T23:59:59.999999-00:01', '9999-12-31T23:59:59.999999Z'],
  ])('given %s, reads it as %s', (text, expected) => {
    expect(parseInstant(text)).toBe(expected);
  });

  it.each([
    '2026-11-22T10:00:00',
    '2026-11-22T10:00:00.1234567Z',
    '2026-11-22 10:00:00Z',
    '2025-02-29T00:00:00Z',
    '2026-11-22T10:60:00Z',
    '2026-11-22T10:00:00+01',
    '',
  ])('refuses %j', (text) => {
    expect(parseInstant(text)).toBeUndefined();
  });
});
