import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createRateLimiter } from '../../../src/api/rate-limit.js';

const start = new Date('2024-05-01T10:00:00.000Z');

/** Calls the limiter `times` times for `subject` and returns what each call answered. */
const hit = (limiter: (subject: string) => number | undefined, subject: string, times: number) =>
  Array.from({ length: times }, () => limiter(subject));

describe('createRateLimiter', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(start);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  const advance = (ms: number) => vi.setSystemTime(new Date(Date.now() + ms));

  it.each([0, -1])('is off with a limit of %i: never limits', (perMinute) => {
    const limiter = createRateLimiter(perMinute);
    expect(hit(limiter, 'user_a', 10_000).every((answer) => answer === undefined)).toBe(true);
  });

  it('lets the first N calls of a minute through and limits the next with the seconds left', () => {
    const limiter = createRateLimiter(3);
    expect(hit(limiter, 'user_a', 3)).toEqual([undefined, undefined, undefined]);
    expect(limiter('user_a')).toBe(60);
    advance(30_500);
    expect(limiter('user_a')).toBe(30); // ceil(29.5)
    advance(29_400);
    expect(limiter('user_a')).toBe(1); // 0.1 s left rounds up, never 0
  });

  it('starts a new window after a minute', () => {
    const limiter = createRateLimiter(2);
    expect(hit(limiter, 'user_a', 3)).toEqual([undefined, undefined, 60]);
    advance(59_999);
    expect(limiter('user_a')).toBe(1);
    advance(1);
    expect(hit(limiter, 'user_a', 3)).toEqual([undefined, undefined, 60]);
  });

  it('limits each caller separately', () => {
    const limiter = createRateLimiter(1);
    expect(limiter('user_a')).toBeUndefined();
    expect(limiter('user_a')).toBe(60);
    expect(limiter('user_b')).toBeUndefined();
    expect(limiter('user_b')).toBe(60);
  });

  it('keeps separate limiters independent', () => {
    const first = createRateLimiter(1);
    const second = createRateLimiter(1);
    expect(first('user_a')).toBeUndefined();
    expect(second('user_a')).toBeUndefined();
    expect(first('user_a')).toBe(60);
  });

  it('counts a limited call in the window: staying over the limit keeps being limited', () => {
    const limiter = createRateLimiter(2);
    hit(limiter, 'user_a', 2);
    advance(10_000);
    expect(hit(limiter, 'user_a', 5)).toEqual([50, 50, 50, 50, 50]);
  });

  it('given more callers in a minute than it keeps windows for, forgets only the oldest windows, not every caller’s', () => {
    const limiter = createRateLimiter(1);
    for (let caller = 0; caller < 50_000; caller++) limiter(`caller_${caller}`);
    expect(hit(limiter, 'user_limited', 2)).toEqual([undefined, 60]);
    for (let caller = 50_000; caller < 100_010; caller++) limiter(`caller_${caller}`);
    expect(limiter('user_limited')).toBe(60);
    expect(limiter('caller_0')).toBeUndefined();
  });

  it('given windows that have run out, drops them as new ones start', () => {
    const limiter = createRateLimiter(1);
    for (let caller = 0; caller < 100_000; caller++) limiter(`caller_${caller}`);
    advance(60_000);
    expect(hit(limiter, 'user_a', 2)).toEqual([undefined, 60]);
    // The run-out windows went with user_a's start: every earlier caller starts afresh, none is over.
    for (let caller = 0; caller < 100_000; caller += 25_000) expect(limiter(`caller_${caller}`)).toBeUndefined();
    expect(limiter('user_a')).toBe(60);
  });
});
