import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createClock } from '../../../src/infra/clock.js';

describe('the service clock', () => {
  beforeEach(() => vi.useFakeTimers({ toFake: ['Date'] }));
  afterEach(() => vi.useRealTimers());

  const millisOf = (timestamp: string) => Date.parse(timestamp.slice(0, 23) + 'Z');

  it('given the wall clock set forward after the start (an NTP step, a resumed VM), follows it', () => {
    vi.setSystemTime(new Date('2026-03-01T10:00:00.000Z'));
    const clock = createClock();
    expect(millisOf(clock())).toBe(Date.parse('2026-03-01T10:00:00.000Z'));
    vi.setSystemTime(new Date('2026-03-01T11:00:00.000Z'));
    expect(millisOf(clock())).toBe(Date.parse('2026-03-01T11:00:00.000Z'));
  });

  it('given the wall clock set back, never goes backwards: each reading a microsecond after the last until the wall clock passes it', () => {
    vi.setSystemTime(new Date('2026-03-01T10:00:00.000Z'));
    const clock = createClock();
    const before = clock();
    vi.setSystemTime(new Date('2026-03-01T09:00:00.000Z'));
    const readings = [clock(), clock()];
    expect(readings.every((reading) => reading > before)).toBe(true);
    expect(readings[1]! > readings[0]!).toBe(true);
    expect(millisOf(readings[1]!)).toBe(Date.parse('2026-03-01T10:00:00.000Z'));
  });
});
