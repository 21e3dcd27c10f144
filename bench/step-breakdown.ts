/** Where a command's time went, from the service's step metrics (src/write/execute.ts, CommandStep). */
import { total, type Scrape } from '../test/support/metrics.js';

const steps = ['wait_turn', 'read', 'decide', 'append', 'wait_earlier_creations', 'wait_projection'];

/** Mean milliseconds per command of each step between two scrapes, and the rest of the request's time. */
export function breakdown(operation: string, before: Scrape, after: Scrape): string {
  const moved = (name: string, labels: Record<string, string>) => total(after, name, labels) - total(before, name, labels);
  const requests = moved('wsapi_http_request_duration_seconds_count', { operation, status: '200' });
  if (requests === 0) return '';
  const perCommand = (seconds: number) => ((seconds * 1000) / requests).toFixed(2);
  const spent = steps.map((step) => [step, moved('wsapi_command_step_duration_seconds_sum', { step })] as const);
  const rest = moved('wsapi_http_request_duration_seconds_sum', { operation, status: '200' }) - spent.reduce((sum, [, s]) => sum + s, 0);
  return [...spent.filter(([, s]) => s > 0).map(([step, s]) => `${step} ${perCommand(s)}`), `rest of the request ${perCommand(rest)}`].join(
    ', ',
  );
}

/** The projector's batches between two scrapes: how many, their mean events, and the mean time to apply one. */
export function projectorBatches(before: Scrape, after: Scrape): string {
  const moved = (name: string) => total(after, name, {}) - total(before, name, {});
  const batches = moved('wsapi_projector_batch_events_count');
  if (batches === 0) return 'no projector batch';
  const events = moved('wsapi_projector_batch_events_sum') / batches;
  const ms = (moved('wsapi_projector_batch_duration_seconds_sum') * 1000) / batches;
  return `${batches} projector batches of ${events.toFixed(1)} events, ${ms.toFixed(2)} ms each`;
}
