import { describe, expect, it } from 'vitest';
import { Metrics } from '../../../src/observability/metrics.js';
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
