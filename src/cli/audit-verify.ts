/**
 * npm run audit:verify
 *
 * Checks the tamper-evident history (contract §16) from the stores themselves: walks every
 * stream of the log, recomputing every event's hashes and following each stream's chain, matches
 * every event to its leaf, then recomputes every organization's tree (nodes, checkpoint roots) from
 * its leaves and checks every checkpoint's signature with the published keys. Prints each break
 * (organization, stream, version, what differs) and exits 1 on any; exits 0 otherwise.
 *
 * The trees are read in one snapshot, before the log: the log's newer events, which the trees
 * have not read yet, are checked for their hashes only.
 */
import { availableParallelism } from 'node:os';
import {
  auditTree,
  describeBreak,
  LogAudit,
  leafWithoutEvent,
  runsWhere,
  type Break,
  type StoredLeaf,
  type StoredLevel,
} from '../integrity/audit.js';
import type { Checkpoint, PublicJwk } from '../integrity/checkpoints.js';
import {
  readCheckpoints,
  readLeafHashes,
  readPublicKeys,
  readAllLeaves,
  readStoredLevels,
  readTreeProgress,
  readTrees,
  type TreeLeaves,
} from '../integrity/adapters/tables.js';
import { openLogSnapshot, streamSplits, type StreamRange } from '../eventstore/postgres-stream-order.js';
import type { GlobalPosition } from '../eventstore/port.js';
import { checkOut, type PoolClient } from '../infra/postgres.js';
import { startWorkerBeside } from '../infra/worker-thread.js';
import { connectOperator, operatorSetup, type OperatorConnection } from './operator.js';
import { commandLine } from './arguments.js';
import type { LogPartMessage, LogPartTask } from './audit-log-part.js';

commandLine(
  'npm run audit:verify',
  `usage: npm run audit:verify

Recomputes every event's hashes and every stream's hash chain, matches each event to its leaf in
its organization's Merkle tree, recomputes every tree and checkpoint root, and checks every
checkpoint's signature. Prints each break (organization, stream, version, what differs) and exits
1 on any; exits 0 otherwise. Uses the service's settings (DATABASE_URL or DATA_DIR, EVENTSTORE_URL).

  -h, --help  this text
`,
  {},
);

const { config, logger } = operatorSetup();

type Tree = {
  organizationId: string;
  /** The size its row gives. */
  size: number;
  leaves: TreeLeaves;
  nodes: StoredLevel[];
  checkpoints: Checkpoint[];
};

const logPage = 5_000;

/** The trees and the keys, read in the snapshot the transaction on `client` holds. */
async function readTreeData(client: PoolClient): Promise<{ keys: PublicJwk[]; trees: Tree[] }> {
  const keys = await readPublicKeys(client);
  const trees: Tree[] = [];
  for (const { organizationId, size } of await readTrees(client)) {
    const leaves = await readLeafHashes(client, organizationId, size);
    const nodes = await readStoredLevels(client, organizationId, leaves.hashes.present.length);
    trees.push({ organizationId, size, leaves, nodes, checkpoints: await readCheckpoints(client, organizationId) });
  }
  return { keys, trees };
}

type LogOutcome = { breaks: Break[]; unmatched: StoredLeaf[]; events: number };

/**
 * The log in PostgreSQL, checked by a worker thread per core, each the streams of one range of
 * names with their leaves, read in one snapshot of the log, taken after the trees': hashing the
 * events is most of the work. Resolves once every worker has joined the snapshot (`joined`, after
 * which its exporting transaction may end), then with what they found, in the log's stream order.
 */
async function checkPostgresLog(
  connection: OperatorConnection,
  treeEnd: GlobalPosition,
): Promise<{ joined: Promise<void>; outcome: Promise<LogOutcome> }> {
  // Checked out (checkOut), a lost connection fails its query, and the audit says it failed (exit
  // 2); an unheard loss would end the process with the code that means breaks were found.
  const { client, release } = await checkOut(connection.pool);
  const log = await openLogSnapshot(client);
  const splits = await streamSplits(client, log, availableParallelism());
  const ranges: StreamRange[] = [...splits, undefined].map((through, part) => ({ after: splits[part - 1], through }));
  const parts = ranges.map((range) => {
    const task: LogPartTask = { databaseUrl: connection.databaseUrl, treeEnd, log, range };
    const worker = startWorkerBeside(import.meta.url, 'audit-log-part', task);
    let joined: () => void;
    return {
      joined: new Promise<void>((resolve) => (joined = resolve)),
      checked: new Promise<LogOutcome>((resolve, reject) => {
        worker.on('message', (message: LogPartMessage) => (message.kind === 'joined' ? joined() : resolve(message)));
        worker.once('error', reject);
        worker.once('exit', (code) => reject(new Error(`a worker checking the log exited with code ${code}`)));
      }),
    };
  });
  const joined = Promise.race([Promise.all(parts.map((part) => part.joined)), Promise.all(parts.map((part) => part.checked))]).finally(
    async () => {
      await client.query('COMMIT');
      release();
    },
  );
  const outcome = Promise.all(parts.map((part) => part.checked)).then((outcomes) => ({
    breaks: outcomes.flatMap((found) => found.breaks),
    unmatched: outcomes.flatMap((found) => found.unmatched),
    events: outcomes.reduce((sum, found) => sum + found.events, 0),
  }));
  // A worker that fails before joining fails `joined` too, which the caller meets first and reports; this marks `outcome` as handled then.
  outcome.catch(() => undefined);
  return { joined: joined.then(() => undefined), outcome };
}

/** The log from an EventStoreDB, in global order, on this thread, against every leaf. */
async function checkLogInOrder(connection: OperatorConnection, leaves: StoredLeaf[], treeEnd: GlobalPosition): Promise<LogOutcome> {
  const audit = new LogAudit(leaves, treeEnd);
  const breaks: Break[] = [];
  for (let after: GlobalPosition = { commit: 0n, prepare: 0n }; ;) {
    const events = await connection.store.readAll(after, logPage);
    if (events.length === 0) break;
    for (const event of events) breaks.push(...audit.check(event));
    after = events[events.length - 1]!.position;
  }
  return { breaks, unmatched: audit.unmatchedLeaves(), events: audit.events };
}

let exitCode = 0;
let connection: OperatorConnection | undefined;
try {
  connection = await connectOperator(config, logger);
  const breaks: Break[] = [];
  const report = (found: Break[]) => {
    for (const broken of found) process.stdout.write(`${describeBreak(broken)}\n`);
    breaks.push(...found);
  };
  // The trees are read in one snapshot, taken before the log's: every leaf's event is in the log read.
  const { client: treeClient, release: releaseTreeClient } = await checkOut(connection.pool);
  let treeData: Awaited<ReturnType<typeof readTreeData>>;
  let checkingLog: Promise<LogOutcome>;
  try {
    await treeClient.query('BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY');
    // The transaction's first statement takes its snapshot: the trees' one, before the log's.
    const treeEnd = await readTreeProgress(treeClient);
    if (config.eventStoreUrl) {
      const leaves = await readAllLeaves(treeClient);
      checkingLog = Promise.resolve().then(() => checkLogInOrder(connection!, leaves, treeEnd));
    } else {
      const { joined, outcome } = await checkPostgresLog(connection, treeEnd);
      checkingLog = outcome;
      // A worker that cannot join the log's snapshot fails here, before the trees are read.
      await joined;
    }
    // The log's check fails (the event store gone, say) where it is awaited, after the trees are read: handled there.
    checkingLog.catch(() => undefined);
    treeData = await readTreeData(treeClient);
    await treeClient.query('COMMIT');
  } finally {
    releaseTreeClient();
  }
  // The trees are checked on this thread while the workers check the log, and reported after it.
  const treeBreaks: Break[] = [];
  let checkpoints = 0;
  for (const tree of treeData.trees) {
    const found = (message: string) => treeBreaks.push({ organizationId: tree.organizationId, message });
    const { hashes, lastStored, outside } = tree.leaves;
    if (tree.size > lastStored + 1)
      found(`the tree's size is ${tree.size}, ${lastStored < 0 ? 'and it holds no leaf' : `its last leaf is ${lastStored}`}`);
    for (const [first, last] of runsWhere(hashes.present.length, (index) => hashes.present[index] !== 1))
      found(first === last ? `leaf ${first} is missing from the tree` : `leaves ${first} to ${last} are missing from the tree`);
    for (const index of outside.indexes) found(`leaf ${index} is outside the tree of ${tree.size} leaves`);
    if (outside.count > outside.indexes.length)
      found(`${outside.count - outside.indexes.length} more leaves are outside the tree of ${tree.size} leaves`);
    treeBreaks.push(...auditTree(tree.organizationId, hashes, tree.nodes, tree.checkpoints, treeData.keys));
    checkpoints += tree.checkpoints.length;
  }
  const log = await checkingLog;
  report(log.breaks);
  const treeOrder = new Map(treeData.trees.map((tree, position) => [tree.organizationId, position]));
  const place = (leaf: StoredLeaf) => treeOrder.get(leaf.organizationId) ?? treeOrder.size;
  report(log.unmatched.sort((a, b) => place(a) - place(b) || a.leafIndex - b.leafIndex).map(leafWithoutEvent));
  report(treeBreaks);
  const checked = `${log.events} events, ${treeData.trees.length} trees, ${checkpoints} checkpoints`;
  if (breaks.length > 0) {
    process.stdout.write(`${breaks.length} break(s) in ${checked}\n`);
    exitCode = 1;
  } else process.stdout.write(`no breaks (${checked})\n`);
} catch (error) {
  process.stderr.write(`audit:verify failed: ${error instanceof Error ? error.message : String(error)}\n`);
  exitCode = 2;
} finally {
  // The outcome is already printed; the process exits next, closing whatever is left.
  await connection?.close().catch(() => undefined);
}
process.exit(exitCode);
