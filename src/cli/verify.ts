/**
 * npm run projections:verify
 *
 * Folds every stream with the write side's evolve and compares the result with the read tables,
 * records and counts, and every record snapshot and the command index with its stream (src/projections/verify.ts). Prints each difference and exits 1 on any;
 * prints "no differences (N workspaces, M solutions)" and exits 0 otherwise.
 *
 * The read tables are read in one snapshot together with their checkpoint, and the log is folded
 * up to that checkpoint, so a projector running (or behind) meanwhile causes no false alarms.
 */
import { readPage } from '../eventstore/event-log.js';
import type { GlobalPosition } from '../eventstore/port.js';
import type { Pool } from '../infra/postgres.js';
import { inReadOnlySnapshot, oneAtATime } from '../infra/postgres.js';
import { connectOperator, operatorSetup, type OperatorConnection } from './operator.js';
import { skippedPositions } from '../projections/dead-letters.js';
import { readCheckpoint } from '../projections/tables.js';
import {
  actualReadModel,
  compareReadModels,
  expectedReadModel,
  verifyCommandIndex,
  verifySnapshots,
  type ReadModelSnapshot,
} from '../projections/verify.js';
import { commandLine } from './arguments.js';

commandLine(
  'npm run projections:verify',
  `usage: npm run projections:verify

Folds every stream of the event log and compares the result with the read tables (records and
counts), at the tables' own checkpoint, and each record snapshot and the command index with its stream. Prints each difference and exits 1 on any; prints
"no differences" and exits 0 otherwise. Uses the service's settings (DATABASE_URL or DATA_DIR,
EVENTSTORE_URL).

  -h, --help  this text
`,
  {},
);

const { config, logger } = operatorSetup();

/** The read tables and their checkpoint, from one snapshot. */
function readTablesAtCheckpoint(pool: Pool): Promise<{ checkpoint: GlobalPosition; actual: ReadModelSnapshot }> {
  return inReadOnlySnapshot(pool, async (client) => {
    const checkpoint = await readCheckpoint(client);
    // actualReadModel only queries; on one client inside the transaction they share its snapshot.
    const actual = await actualReadModel(oneAtATime(client) as Pool);
    return { checkpoint, actual };
  });
}

let exitCode = 0;
let connection: OperatorConnection | undefined;
try {
  connection = await connectOperator(config, logger);
  const { checkpoint, actual } = await readTablesAtCheckpoint(connection.pool);
  const expected = await expectedReadModel(connection.store, checkpoint, await skippedPositions(connection.pool));
  const snapshots = await verifySnapshots(connection.store, connection.pool);
  const commandIndex = await verifyCommandIndex(connection.store, connection.pool);
  const differences = [...compareReadModels(expected, actual), ...snapshots.differences, ...commandIndex.differences];
  const next = await readPage(connection.store, checkpoint, 1);
  const behind = next.end !== undefined || next.unreadable !== undefined;
  if (behind) {
    process.stderr.write('note: the projection has not applied the newest events yet; compared at its checkpoint\n');
  }
  for (const line of differences) process.stdout.write(`${line}\n`);
  if (differences.length > 0) {
    process.stdout.write(`${differences.length} difference(s)\n`);
    exitCode = 1;
  } else {
    process.stdout.write(`no differences (${expected.workspaces.size} workspaces, ${expected.solutions.size} solutions)\n`);
    if (snapshots.checked > 0) process.stdout.write(`${snapshots.checked} snapshot(s) agree with the log\n`);
    if (commandIndex.checked > 0) process.stdout.write(`the command index of ${commandIndex.checked} stream(s) agrees with the log\n`);
  }
} catch (error) {
  process.stderr.write(`verify failed: ${error instanceof Error ? error.message : String(error)}\n`);
  exitCode = 2;
} finally {
  // The outcome is already printed; the process exits next, closing whatever is left.
  await connection?.close().catch(() => undefined);
}
process.exit(exitCode);
