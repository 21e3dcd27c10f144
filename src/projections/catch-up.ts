import type { GlobalPosition } from '../eventstore/port.js';

/**
 * How many events the projector reads at a time. Caught up, it reads small pages, so that each
 * append is projected on its own within a millisecond or two; behind, each full page doubles the
 * next, up to `max`, so that a backlog is applied in large batches (rows loaded once per batch,
 * one multi-row write, one round trip per table) and the per-batch costs stop mattering. A page
 * that comes back short means the end of the log was reached: back to small pages.
 */
export type PageSizes = { min: number; max: number };

export const defaultPageSizes: PageSizes = { min: 500, max: 2_500 };

export function nextPageSize(current: number, read: number, sizes: PageSizes): number {
  if (read < current) return sizes.min;
  return Math.min(Math.max(current * 2, sizes.min), sizes.max);
}

/**
 * Where the projection was, and when, over the last `windowMs`: the rate it moves at, for the
 * estimates of how long a backlog takes (readiness, metrics, commands that cannot wait that long).
 * Times are passed in (milliseconds), so that the arithmetic stays pure.
 */
export class ProgressSamples {
  private samples: { at: number; position: GlobalPosition }[] = [];

  constructor(
    private readonly windowMs = 10_000,
    /** Samples closer together than this are merged: one per batch would be thousands a second when live. */
    private readonly spacingMs = 100,
  ) {}

  record(at: number, position: GlobalPosition): void {
    const beforeLast = this.samples.at(-2);
    if (beforeLast && at - beforeLast.at < this.spacingMs) this.samples[this.samples.length - 1] = { at, position };
    else this.samples.push({ at, position });
    this.forget(at);
  }

  /**
   * Events per second over the window up to `now`, counted by `estimate` between the oldest sample
   * and the newest: a projection that stopped moving slows the rate as time passes. 0 when unknown
   * (fewer than two samples in the window).
   */
  eventsPerSecond(now: number, estimate: (from: GlobalPosition, to: GlobalPosition) => number): number {
    this.forget(now);
    const first = this.samples[0];
    const last = this.samples.at(-1);
    if (!first || !last || first === last || now <= first.at) return 0;
    return estimate(first.position, last.position) / ((now - first.at) / 1000);
  }

  /**
   * The fastest rate between two consecutive samples in the window taken from `since` on: what the
   * projection is known to manage when it has the events to apply (`since` the backlog was seen),
   * as opposed to the mean, which idle time lowers. 0 when unknown.
   */
  peakEventsPerSecond(now: number, estimate: (from: GlobalPosition, to: GlobalPosition) => number, since = -Infinity): number {
    this.forget(now);
    let peak = 0;
    for (let index = 1; index < this.samples.length; index++) {
      const [before, after] = [this.samples[index - 1]!, this.samples[index]!];
      if (before.at >= since && after.at > before.at)
        peak = Math.max(peak, estimate(before.position, after.position) / ((after.at - before.at) / 1000));
    }
    return peak;
  }

  private forget(now: number): void {
    while (this.samples.length > 0 && this.samples[0]!.at < now - this.windowMs) this.samples.shift();
  }
}
