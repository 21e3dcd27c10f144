/**
 * npm run projections:dead-letters -- list | retry <id> | skip <id> [--by <name>] [--note <text>]
 *
 * The events of the service's own that the projector could not apply (src/projections/dead-letters.ts):
 * `list` shows them, `retry` asks the projector to try the one it is stopped at again (after a fix
 * was deployed, say), `skip` lets it go on without that event. Every decision is recorded with who
 * made it, when, and a note.
 */
import { userInfo } from 'node:os';
import type { Pool } from '../infra/postgres.js';
import { listDeadLetters, resolveDeadLetter, type DeadLetter } from '../projections/dead-letters.js';
import { encodePosition } from '../eventstore/port.js';
import { commandLine, usageError } from './arguments.js';
import { connectOperator, operatorSetup, type OperatorConnection } from './operator.js';

const tool = 'npm run projections:dead-letters';
const usage = `usage: npm run projections:dead-letters -- list | retry <id> | skip <id> [--by <name>] [--note <text>]

Events of the service's own that the projector could not apply. The projector stops at such an
event, so that the read tables stay a faithful prefix of the log; commands answer at once meanwhile
(with x-projection-behind: true) and /readyz names the event. Uses the service's settings
(DATABASE_URL or DATA_DIR).

  list           every dead letter, newest first: its id, state, position, stream, version, type,
                 attempts and error, and how it was resolved
  retry <id>     the projector tries the event again within a second (after a fix was deployed);
                 if it fails again it stays stopped, and list shows one more attempt
  skip <id>      the projector goes on without the event: nothing of it is applied, now or by a
                 rebuild, and verify leaves it out too
  --by <name>    who decides (default: the user running the command)
  --note <text>  why, kept with the decision
  -h, --help     this text
`;

const parsed = commandLine(tool, usage, { by: { type: 'string' }, note: { type: 'string' } }, true);
const [action, id, ...extra] = parsed.positionals;
if (action !== 'list' && action !== 'retry' && action !== 'skip') {
  usageError(tool, action ? `unknown action ${action}: list, retry or skip` : 'say what to do: list, retry <id> or skip <id>');
}
if (action === 'list' && id !== undefined) usageError(tool, `list takes no id (${id})`);
if (action === 'list' && (parsed.values.by !== undefined || parsed.values.note !== undefined)) {
  usageError(tool, '--by and --note go with retry or skip, not list');
}
/** The largest id a dead letter can have (a bigint column); a longer number would reach PostgreSQL only to be refused there. */
const largestId = 2n ** 63n - 1n;
if (action !== 'list' && !(/^\d{1,19}$/.test(id ?? '') && BigInt(id!) <= largestId)) {
  usageError(tool, `${action} needs the id of a dead letter, as list shows it`);
}
if (extra.length > 0) usageError(tool, `one dead letter at a time: ${extra.join(' ')} is one too many`);

const { config, logger } = operatorSetup();

function table(deadLetters: DeadLetter[]): string {
  const header = ['ID', 'STATE', 'POSITION', 'STREAM', 'VERSION', 'TYPE', 'ATTEMPTS', 'LAST FAILED', 'RESOLVED BY', 'ERROR'];
  const rows = deadLetters.map((deadLetter) => [
    deadLetter.deadLetterId,
    deadLetter.resolution ?? 'blocking',
    encodePosition(deadLetter.position),
    deadLetter.streamName,
    deadLetter.version.toString(),
    deadLetter.type,
    String(deadLetter.attempts),
    deadLetter.lastFailedAt,
    deadLetter.resolvedBy ? `${deadLetter.resolvedBy} ${deadLetter.resolvedAt}${deadLetter.note ? ` (${deadLetter.note})` : ''}` : '',
    deadLetter.error,
  ]);
  const widths = header.map((_, column) => Math.max(...[header, ...rows].map((row) => row[column]!.length)));
  return `${[header, ...rows]
    .map((row) =>
      row
        .map((cell, column) => cell.padEnd(widths[column]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n')}\n`;
}

async function run(pool: Pool): Promise<number> {
  if (action === 'list') {
    const deadLetters = await listDeadLetters(pool);
    process.stdout.write(deadLetters.length === 0 ? 'no dead letters\n' : table(deadLetters));
    return 0;
  }
  const by = parsed.values.by ?? userInfo().username;
  const resolved = await resolveDeadLetter(pool, id!, { action: action as 'retry' | 'skip', by, note: parsed.values.note });
  if (!resolved) {
    process.stderr.write(`no unresolved dead letter ${id} (see ${tool} -- list)\n`);
    return 1;
  }
  const what = `${resolved.streamName} version ${resolved.version} (${resolved.type})`;
  process.stdout.write(
    action === 'skip'
      ? `dead letter ${id} skipped by ${by}: the projector goes on without ${what}\n`
      : `retry of dead letter ${id} asked by ${by}: the projector tries ${what} again; list shows the outcome\n`,
  );
  return 0;
}

let exitCode = 0;
let connection: OperatorConnection | undefined;
try {
  connection = await connectOperator(config, logger);
  exitCode = await run(connection.pool);
} catch (error) {
  process.stderr.write(`dead letters failed: ${error instanceof Error ? error.message : String(error)}\n`);
  exitCode = 2;
} finally {
  // The outcome is already printed; the process exits next, closing whatever is left.
  await connection?.close().catch(() => undefined);
}
process.exit(exitCode);
