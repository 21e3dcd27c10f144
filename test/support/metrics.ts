import parsePrometheusTextFormat, { type MetricFamily, type Sample } from 'parse-prometheus-text-format';

export type Scrape = {
  /** The metric families as exposed: name, help and type. */
  families: Map<string, MetricFamily>;
  /**
   * Every series by its own name (`x_count`, `x_sum` and `x_bucket` for a histogram `x`), labels
   * kept. The parser folds a histogram's samples into one and drops their labels; parsed as
   * untyped, each series keeps them.
   */
  series: Map<string, MetricFamily>;
};

/** Families by name; a series that comes back in parts (a histogram's, label set by label set) is joined. */
function byName(families: MetricFamily[]): Map<string, MetricFamily> {
  const joined = new Map<string, MetricFamily>();
  for (const family of families) {
    const earlier = joined.get(family.name);
    joined.set(family.name, earlier ? { ...earlier, metrics: [...earlier.metrics, ...family.metrics] } : family);
  }
  return joined;
}

export function parseScrape(text: string): Scrape {
  return {
    families: byName(parsePrometheusTextFormat(text)),
    series: byName(parsePrometheusTextFormat(text.replace(/^# TYPE (\S+) (histogram|summary)$/gm, '# TYPE $1 untyped'))),
  };
}

/** GET a Prometheus endpoint over HTTP and parse it. */
export async function scrape(url: string): Promise<Scrape> {
  const response = await fetch(url);
  if (response.status !== 200) throw new Error(`${url} answered ${response.status}`);
  return parseScrape(await response.text());
}

const matches = (sample: Sample, labels: Record<string, string>) =>
  Object.entries(labels).every(([name, value]) => sample.labels?.[name] === value);

/**
 * The sum of the samples of series `name` that carry `labels`, such as a counter's value or a
 * histogram's `_count` or `_sum`. 0 when the metric exists but has no such sample yet.
 */
export function total(metrics: Scrape, name: string, labels: Record<string, string> = {}): number {
  const family = metrics.families.get(name.replace(/_(count|sum|bucket)$/, '')) ?? metrics.families.get(name);
  if (!family) throw new Error(`no metric ${name} in the scrape`);
  return (metrics.series.get(name)?.metrics ?? [])
    .filter((sample) => matches(sample, labels))
    .reduce((sum, sample) => sum + Number(sample.value), 0);
}
