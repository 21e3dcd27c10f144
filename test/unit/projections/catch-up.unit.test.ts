import { describe, expect, it } from 'vitest';
import { nextPageSize, ProgressSamples } from '../../../src/projections/catch-up.js';

const sizes = { min: 500, max: 20_000 };

describe('the projector page size', () => {
  it('given full pages, doubles up to the maximum', () => {
    const grown: number[] = [];
    for (let size = sizes.min, turn = 0; turn < 8; turn += 1) grown.push((size = nextPageSize(size, size, sizes)));
    expect(grown).toEqual([1000, 2000, 4000, 8000, 16_000, 20_000, 20_000, 20_000]);
  });

  it('given a short page (the end of the log), goes back to the minimum', () => {
    expect(nextPageSize(20_000, 19_999, sizes)).toBe(500);
    expect(nextPageSize(500, 0, sizes)).toBe(500);
  });

  it('given a minimum above the default maximum, never reads less than the minimum', () => {
    expect(nextPageSize(50, 50, { min: 50, max: 50 })).toBe(50);
  });
});

describe('the rate the projection moves at', () => {
  const at = (events: number) => ({ commit: BigInt(events), prepare: BigInt(events) });
  const count = (from: { prepare: bigint }, to: { prepare: bigint }) => Number(to.prepare - from.prepare);

  it('given no movement yet, is unknown (0)', () => {
    const samples = new ProgressSamples();
    expect(samples.eventsPerSecond(0, count)).toBe(0);
    samples.record(0, at(100));
    expect(samples.eventsPerSecond(500, count)).toBe(0);
  });

  it('given steady progress, is the events moved over the time since the oldest sample', () => {
    const samples = new ProgressSamples();
    for (let ms = 0; ms <= 2000; ms += 250) samples.record(ms, at(ms * 10));
    expect(samples.eventsPerSecond(2000, count)).toBe(10_000);
  });

  it('given a projection that stopped moving, slows as time passes, and forgets what is older than the window', () => {
    const samples = new ProgressSamples(10_000);
    samples.record(0, at(0));
    samples.record(1000, at(10_000));
    expect(samples.eventsPerSecond(2000, count)).toBe(5000);
    expect(samples.eventsPerSecond(10_500, count)).toBe(0);
  });

  it('given samples closer together than the spacing, keeps the newest of them', () => {
    const samples = new ProgressSamples(10_000, 100);
    samples.record(0, at(0));
    samples.record(10, at(10));
    samples.record(20, at(20));
    samples.record(30, at(3000));
    expect(samples.eventsPerSecond(1000, count)).toBe(3000);
  });
});

describe('the fastest rate the projection has shown', () => {
  const at = (events: number) => ({ commit: BigInt(events), prepare: BigInt(events) });
  const count = (from: { prepare: bigint }, to: { prepare: bigint }) => Number(to.prepare - from.prepare);

  it('given a burst after an idle spell, is the burst rate, not the mean the idle time lowers', () => {
    const samples = new ProgressSamples();
    samples.record(0, at(0));
    samples.record(5000, at(10));
    samples.record(6000, at(20_010));
    samples.record(7000, at(40_010));
    expect(samples.peakEventsPerSecond(7000, count)).toBe(20_000);
    expect(samples.eventsPerSecond(7000, count)).toBeCloseTo(40_010 / 7, 0);
  });

  it('given fewer than two samples, is unknown (0)', () => {
    const samples = new ProgressSamples();
    samples.record(0, at(10));
    expect(samples.peakEventsPerSecond(100, count)).toBe(0);
  });
});
