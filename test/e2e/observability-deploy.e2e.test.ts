import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { scrape, type Scrape } from '../support/metrics.js';
import { startTestService, type TestService } from '../support/service.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const read = (file: string) => readFileSync(path.join(root, file), 'utf8');

type ComposeService = { profiles?: string[]; volumes?: string[]; environment?: Record<string, string>; ports?: string[] };
const compose = parse(read('docker-compose.yml')) as { services: Record<string, ComposeService> };
const prometheus = parse(read('deploy/prometheus/prometheus.yml')) as {
  rule_files: string[];
  scrape_configs: { metrics_path: string; static_configs: { targets: string[] }[] }[];
};
const alerts = parse(read('deploy/prometheus/alerts.yml')) as { groups: { rules: { alert: string; expr: string }[] }[] };
const datasources = parse(read('deploy/grafana/provisioning/datasources/prometheus.yml')) as {
  datasources: { uid: string; type: string; url: string }[];
};
const dashboardProviders = parse(read('deploy/grafana/provisioning/dashboards/dashboards.yml')) as {
  providers: { options: { path: string } }[];
};
const dashboard = JSON.parse(read('deploy/grafana/dashboards/workspace-solution-api.json')) as {
  panels: { title: string; datasource: { uid: string }; targets: { expr: string }[] }[];
};

/** The host files a compose service mounts, by the path it sees them at. */
const mounts = (service: ComposeService) =>
  new Map(
    (service.volumes ?? [])
      .filter((volume) => volume.startsWith('./'))
      .map((volume) => {
        const [host, container] = volume.split(':') as [string, string];
        return [container, host];
      }),
  );

/** The service's metric names a PromQL expression reads (a histogram's series named as its family). */
const metricNamesIn = (expr: string, metrics: Scrape) =>
  [...expr.matchAll(/\bwsapi_[a-z0-9_]+/g)].map(([name]) => {
    const family = name.replace(/_(bucket|sum|count)$/, '');
    return family !== name && metrics.families.get(family)?.type === 'HISTOGRAM' ? family : name;
  });

/**
 * `docker compose --profile observability up` cannot run here (no Docker engine): its files are
 * checked instead, and every metric the dashboard and the alerts query must be in a real scrape.
 */
describe('the observability profile', () => {
  let service: TestService;
  let metrics: Scrape;

  beforeAll(async () => {
    service = await startTestService();
    metrics = await scrape(`${service.url}/metrics`);
  });
  afterAll(() => service?.close());

  it('runs Prometheus and Grafana only in the profile, with the files they mount present', () => {
    for (const name of ['prometheus', 'grafana']) {
      const definition = compose.services[name]!;
      expect(definition.profiles).toEqual(['observability']);
      for (const host of mounts(definition).values()) expect(existsSync(path.join(root, host)), host).toBe(true);
    }
  });

  it('scrapes the API on its metrics port, which is not published on the host', () => {
    const api = compose.services.api!;
    const metricsPort = api.environment?.METRICS_PORT;
    expect(metricsPort).toMatch(/^\d+$/);
    expect(api.ports?.some((port) => port.endsWith(`:${metricsPort}`))).toBe(false);
    const [job] = prometheus.scrape_configs;
    expect(job!.metrics_path).toBe('/metrics');
    expect(job!.static_configs.flatMap((config) => config.targets)).toEqual([`api:${metricsPort}`]);
    const prometheusMounts = mounts(compose.services.prometheus!);
    for (const ruleFile of prometheus.rule_files) expect(prometheusMounts.has(ruleFile), ruleFile).toBe(true);
  });

  it('gives Grafana the Prometheus service as its data source and the dashboard from its mounted folder', () => {
    const grafanaMounts = mounts(compose.services.grafana!);
    expect(datasources.datasources).toEqual([
      expect.objectContaining({ uid: 'prometheus', type: 'prometheus', url: 'http://prometheus:9090' }),
    ]);
    for (const panel of dashboard.panels) expect(panel.datasource.uid, panel.title).toBe('prometheus');
    expect(grafanaMounts.get(dashboardProviders.providers[0]!.options.path)).toBe('./deploy/grafana/dashboards');
  });

  it('queries in the dashboard and the alerts only metrics that a real scrape has', () => {
    const expressions = [
      ...dashboard.panels.flatMap((panel) => panel.targets.map((target) => target.expr)),
      ...alerts.groups.flatMap((group) => group.rules.map((rule) => rule.expr)),
    ];
    const queried = new Set(expressions.flatMap((expr) => metricNamesIn(expr, metrics)));
    expect(queried.size).toBeGreaterThan(10);
    const missing = [...queried].filter((name) => !metrics.families.has(name));
    expect(missing).toEqual([]);
  });

  it('shows every metric of the service (apart from the process metrics) on the dashboard', () => {
    const onDashboard = new Set(
      dashboard.panels.flatMap((panel) => panel.targets.flatMap((target) => metricNamesIn(target.expr, metrics))),
    );
    const ours = [...metrics.families.keys()].filter((name) => !/^wsapi_(process|nodejs)_/.test(name));
    expect(ours.filter((name) => !onDashboard.has(name))).toEqual([]);
  });
});
