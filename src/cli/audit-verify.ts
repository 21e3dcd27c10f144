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
import { auditTree, describeBreak, LogAudit, type Break } from '../integrity/audit.js';
import type { Checkpoint, PublicJwk } from '../integrity/checkpoints.js';
import type { MerkleNode } from '../integrity/merkle.js';
import {
  readAllNodes,
  readCheckpoints,
  readLeaves,
  readPublicKeys,
  readTreeProgress,
  readTrees,
  type LeafRow,
} from '../integrity/adapters/tables.js';
import type { GlobalPosition } from '../eventstore/port.js';
import { inReadOnlySnapshot, type Pool } from '../infra/postgres.js';
import { connectOperator, operatorSetup, type OperatorConnection } from './operator.js';
import { commandLine } from './arguments.js';

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

type TreeSnapshot = {
  end: GlobalPosition;
  keys: PublicJwk[];
  trees: { organizationId: string; leaves: LeafRow[]; nodes: MerkleNode[]; checkpoints: Checkpoint[] }[];
};

const leafPage = 50_000;
const logPage = 5_000;

/** The trees, their progress and the keys, from one snapshot. */
function readTreeSnapshot(pool: Pool): Promise<TreeSnapshot> {
  return inReadOnlySnapshot(pool, async (client) => {
    const end = await readTreeProgress(client);
    const keys = await readPublicKeys(client);
    const trees: TreeSnapshot['trees'] = [];
    for (const { organizationId } of await readTrees(client)) {
      const leaves: LeafRow[] = [];
      for (let page = await readLeaves(client, organizationId, 0, leafPage); page.length > 0;) {
        leaves.push(...page);
        page = page.length < leafPage ? [] : await readLeaves(client, organizationId, leaves.length, leafPage);
      }
      const nodes = await readAllNodes(client, organizationId);
      trees.push({ organizationId, leaves, nodes, checkpoints: await readCheckpoints(client, organizationId) });
    }
    return { end, keys, trees };
  });
}

let exitCode = 0;
let connection: OperatorConnection | undefined;
try {
  connection = await connectOperator(config, logger);
  const snapshot = await readTreeSnapshot(connection.pool);
  const breaks: Break[] = [];
  const report = (found: Break[]) => {
    for (const broken of found) process.stdout.write(`${describeBreak(broken)}\n`);
    breaks.push(...found);
  };
  const audit = new LogAudit(
    snapshot.trees.flatMap((tree) => tree.leaves),
    snapshot.end,
  );
  const { store } = connection;
  // Each stream's chain is followed on its own, so the log may be read stream by stream, where the
  // store can (PostgreSQL: one snapshot, in bulk, as the rebuild reads it), else in global order.
  if (store.readLogByStream) {
    await store.readLogByStream(async (log) => {
      for await (const events of log.pages) for (const event of events) report(audit.check(event));
    });
  } else {
    for (let after: GlobalPosition = { commit: 0n, prepare: 0n }; ;) {
      const events = await store.readAll(after, logPage);
      if (events.length === 0) break;
      for (const event of events) report(audit.check(event));
      after = events[events.length - 1]!.position;
    }
  }
  report(audit.unmatchedLeaves());
  let checkpoints = 0;
  for (const tree of snapshot.trees) {
    const hashes = tree.leaves.map((leaf, index) => {
      if (leaf.leafIndex !== index) report([{ organizationId: tree.organizationId, message: `leaf ${index} is missing from the tree` }]);
      return leaf.hash;
    });
    report(auditTree(tree.organizationId, hashes, tree.nodes, tree.checkpoints, snapshot.keys));
    checkpoints += tree.checkpoints.length;
  }
  const checked = `${audit.events} events, ${snapshot.trees.length} trees, ${checkpoints} checkpoints`;
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
