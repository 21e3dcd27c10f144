import { describe, expect, it } from 'vitest';
import { Metrics, type ScrapeSources } from '../../../src/observability/metrics.js';
import type { Readiness } from '../../../src/observability/readiness.js';
import { parseScrape, total } from '../../support/metrics.js';

describe('the metrics', () => {
  it('show the integrity counters at 0 by reason from the start, so that their first event is an increase an alert sees', async () => {
    const metrics = new Metrics();
    const scrape = parseScrape(await metrics.registry.metrics());
    const samples = scrape.series.get('wsapi_integrity_events_left_out_total')?.metrics ?? [];
    expect(samples.map((sample) => [sample.labels?.reason, Number(sample.value)]).sort()).toEqual([
      ['no_organization', 0],
      ['repeated_version', 0],
    ]);
    metrics.integrityEventsLeftOut.inc({ reason: 'repeated_version' });
    expect(
      total(parseScrape(await metrics.registry.metrics()), 'wsapi_integrity_events_left_out_total', { reason: 'repeated_version' }),
    ).toBe(1);
  });
});

describe('the readiness gauge', () => {
  const sourcesAnswering = (readiness: () => Promise<Readiness>): ScrapeSources => ({
    readiness,
    projectionLag: async () => ({ events: 0, seconds: 0 }),
    projectionBacklog: async () => ({ events: 0, catchUpSeconds: 0 }),
    cascadeBacklog: async () => 0,
    deadLetters: async () => ({ blocking: 0, skipped: 0, retried: 0 }),
  });
  const readyChecks = async (metrics: Metrics) =>
    Object.fromEntries(
      (parseScrape(await metrics.registry.metrics()).series.get('wsapi_ready')?.metrics ?? []).map((sample) => [
        sample.labels?.check,
        Number(sample.value),
      ]),
    );

  // A series that vanishes while the stores are down breaks a dashboard's line and an alert's rule on it.
  it('given the stores unreachable, reports the projection as unknown (NaN), not absent', async () => {
    const metrics = new Metrics();
    metrics.watch(sourcesAnswering(async () => ({ ready: false, checks: { event_store: 'unreachable', read_database: 'ok' } })));
    expect(await readyChecks(metrics)).toEqual({ all: 0, event_store: 0, read_database: 1, projection: NaN });
  });

  it('given a readiness check that fails outright, reports every part as unknown', async () => {
    const metrics = new Metrics();
    metrics.watch(sourcesAnswering(() => Promise.reject(new Error('pool closed'))));
    expect(await readyChecks(metrics)).toEqual({ all: 0, event_store: NaN, read_database: NaN, projection: NaN });
  });

  it('given every part passing, reports each as 1', async () => {
    const metrics = new Metrics();
    metrics.watch(
      sourcesAnswering(async () => ({ ready: true, checks: { event_store: 'ok', read_database: 'ok', projection: 'caught_up' } })),
    );
    expect(await readyChecks(metrics)).toEqual({ all: 1, event_store: 1, read_database: 1, projection: 1 });
  });
});
