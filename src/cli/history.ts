/**
 * npm run history -- <ws_...|sol_...> [--full]
 *
 * One record's history for operators, as a table: version, when, who, the event, and what changed
 * (for a creation its initial fields, for an update the fields it set, for a deletion its reason
 * when there is one). Read straight from the event log through the port, whatever the record's
 * organization: operators are trusted. Long values are shortened unless --full is given.
 */
import { readRecord } from '../eventstore/event-log.js';
import type { EventStore } from '../eventstore/port.js';
import { solutionStream, workspaceStream } from '../eventstore/stream-names.js';
import { connectOperator, operatorSetup, type OperatorConnection } from './operator.js';
import type { Envelope } from '../domain/events.js';
import { solutionId, workspaceId } from '../domain/values.js';
import { commandLine, usageError } from './arguments.js';

const tool = 'npm run history';
const usage = `usage: npm run history -- <ws_...|sol_...> [--full]

One record's history from the event log, oldest first: version, when, who, the event and what it
changed. Works for deleted records too. Uses the service's settings (DATABASE_URL or DATA_DIR,
EVENTSTORE_URL).

  --full      show long values whole instead of shortened
  -h, --help  this text
`;
const parsed = commandLine(tool, usage, { full: { type: 'boolean', default: false } }, true);
const [id, ...extra] = parsed.positionals;
const kind = workspaceId.safeParse(id).success ? 'workspace' : solutionId.safeParse(id).success ? 'solution' : undefined;
if (extra.length > 0) usageError(tool, `one record at a time: ${extra.join(' ')} is one too many`);
if (!id || !kind)
  usageError(tool, id ? `${id} is not a workspace (ws_...) or solution (sol_...) id` : 'give the id of a workspace or solution');

const { config, logger } = operatorSetup();

type Row = { version: string; when: string; who: string; event: string; changes: string[] };

const maxValueLength = 80;
const shown = (value: unknown, full: boolean) => {
  const text = JSON.stringify(value) ?? 'undefined';
  return full || text.length <= maxValueLength ? text : `${text.slice(0, maxValueLength - 1)}…`;
};

/** The API's field order (the log's jsonb keeps none); fields it does not know follow by name. */
const fieldOrder = ['organization_id', 'workspace_id', 'name', 'description', 'attributes', 'documentation', 'reason'];
const rank = (key: string) => (fieldOrder.includes(key) ? fieldOrder.indexOf(key) : fieldOrder.length);

/** What an event changed, one `field=value` per line. */
function changesOf(event: Envelope, full: boolean): string[] {
  const fields = (data: Record<string, unknown>, skip: string[]) =>
    Object.entries(data)
      .filter(([key, value]) => !skip.includes(key) && value !== undefined)
      .sort(([a], [b]) => rank(a) - rank(b) || a.localeCompare(b))
      .map(([key, value]) => `${key}=${shown(value, full)}`);
  switch (event.type) {
    case 'WorkspaceCreated':
    case 'SolutionCreated':
    case 'WorkspaceUpdated':
    case 'SolutionUpdated':
      return fields(event.data, ['id']);
    case 'WorkspaceDeleted':
      return [];
    case 'SolutionDeleted':
      return event.data.reason === undefined ? [] : [`reason=${event.data.reason}`];
    default:
      return fields((event as { data: Record<string, unknown> }).data ?? {}, ['id']);
  }
}

async function historyRows(store: EventStore, full: boolean): Promise<Row[]> {
  const recorded = await readRecord(store, kind === 'workspace' ? workspaceStream(id!) : solutionStream(id!));
  return recorded.events.map(({ event: envelope, version }) => {
    return {
      version: version.toString(),
      when: envelope.metadata.occurred_at,
      who: envelope.metadata.actor,
      event: envelope.type,
      changes: changesOf(envelope, full),
    };
  });
}

function table(rows: Row[]): string {
  const header: Row = { version: 'VERSION', when: 'WHEN', who: 'WHO', event: 'EVENT', changes: ['WHAT CHANGED'] };
  const all = [header, ...rows];
  const width = (pick: (row: Row) => string) => Math.max(...all.map((row) => pick(row).length));
  const widths = [width((r) => r.version), width((r) => r.when), width((r) => r.who), width((r) => r.event)];
  const line = (cells: string[], change: string) =>
    `${cells.map((cell, i) => (i === 0 ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!))).join('  ')}  ${change}`.trimEnd();
  const out: string[] = [];
  for (const row of all) {
    const [first = '', ...more] = row.changes;
    out.push(line([row.version, row.when, row.who, row.event], first));
    for (const change of more) out.push(line(['', '', '', ''], change));
  }
  return `${out.join('\n')}\n`;
}

let exitCode = 0;
let connection: OperatorConnection | undefined;
try {
  connection = await connectOperator(config, logger, { migrate: false });
  const rows = await historyRows(connection.store, parsed.values.full);
  if (rows.length === 0) {
    process.stderr.write(`no ${kind} ${id} in the event log\n`);
    exitCode = 1;
  } else {
    process.stdout.write(`${kind} ${id}: ${rows.length} event(s)\n${table(rows)}`);
  }
} catch (error) {
  process.stderr.write(`history failed: ${error instanceof Error ? error.message : String(error)}\n`);
  exitCode = 2;
} finally {
  // The outcome is already printed; the process exits next, closing whatever is left.
  await connection?.close().catch(() => undefined);
}
process.exit(exitCode);
