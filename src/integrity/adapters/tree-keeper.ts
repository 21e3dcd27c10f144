import type { Logger } from 'pino';
import { comparePositions, latestPosition, type EventStore, type GlobalPosition, type RecordedEvent } from '../../eventstore/port.js';
import { inTransaction, type Pool } from '../../infra/postgres.js';
import { sleepUnlessAborted, unlessAborted } from '../../infra/sleep.js';
import { signCheckpoint, type SigningKey } from '../checkpoints.js';
import { appendLeaves, frontier, lookupIn, nodesRead, rootHash } from '../merkle.js';
import { placeEvents, type PlacedLeaf } from '../tree.js';
import {
  lockProgress,
  readNodes,
  readNodesOfTrees,
  readTreeProgress,
  readStreamHeads,
  leafKey,
  leavesHeld,
  saveCheckpoint,
  saveTreeBatch,
  treesDueForCheckpoint,
  treeSizes,
  type TreeBatch,
} from './tables.js';

const defaultBatchSize = 2000;
/** The longest wait between two tries while the store or database is away. */
const maxRetryDelayMs = 5_000;

export type TreeKeeperOptions = {
  pool: Pool;
  store: EventStore;
  key: SigningKey;
  /** The current instant in the §8 form, and that instant less some milliseconds. */
  now: () => string;
  before: (timestamp: string, milliseconds: number) => string;
  logger: Logger;
  checkpointIntervalMs: number;
  batchSize?: number;
  /**
   * How long it sleeps once it has read to the log's end. Under a steady stream of commands it
   * then takes what arrived meanwhile as one batch, rather than a transaction per few events
   * competing with the commands for the cores (and for the store's read watermark).
   */
  idleMs?: number;
  /**
   * Whether to leave the log alone for now: while the projection catches up a large backlog (a new
   * or restored read database), the tree waits, so that the projection, which readiness and every
   * command wait for, has the cores to itself. The tree, which nothing waits for, follows after.
   */
  deferWhile?: () => Promise<boolean>;
  /** Told of each round that failed (it is retried), and of each event left out of the trees, with why. */
  onRoundFailed?: () => void;
  onLeftOut?: (reason: 'no_organization' | 'repeated_version') => void;
};

/**
 * Keeps each organization's Merkle tree (contract §16): reads the log in global order and appends
 * every chained event to its organization's tree, then signs a checkpoint of each tree that grew
 * when its last checkpoint is `checkpointIntervalMs` old (or it has none).
 *
 * It runs in its own transactions, not the projector's: the tree is append-only evidence, while
 * the read tables are rebuilt at will, and the projector's batches are on the path of every
 * command's answer. Each batch is written under the keeper's advisory lock, from the position it was
 * read after, so several instances may run it: they take turns, and each batch is whole or not at
 * all (a crash mid-batch leaves the tree as it was).
 * Signing comes after, in its own statement: a crash between leaves a tree with no checkpoint of
 * its newest size, which the next round signs.
 */
export class TreeKeeper {
  private running: Promise<void> | undefined;
  private readonly stopping = new AbortController();

  constructor(private readonly options: TreeKeeperOptions) {}

  start(): void {
    this.running ??= this.run();
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    await this.running;
  }

  private async run(): Promise<void> {
    const { logger, idleMs = 200, batchSize = defaultBatchSize } = this.options;
    let failures = 0;
    while (!this.stopping.signal.aborted) {
      let read = 0;
      try {
        // A stop does not wait for the round: an event store that never answers would hold it for its reads' whole time limit.
        read = await unlessAborted(this.round(), this.stopping.signal);
        failures = 0;
      } catch (error) {
        if (this.stopping.signal.aborted) break;
        // The store or database is away: the tree waits and tries again, backing off as the
        // projector does (up to 5 s), so an outage is a few lines of log, not five a second.
        failures += 1;
        this.options.onRoundFailed?.();
        logger.warn({ err: (error as Error).message, failures }, 'integrity tree could not advance; retrying');
        await sleepUnlessAborted(Math.min(idleMs * 2 ** failures, maxRetryDelayMs), this.stopping.signal);
        continue;
      }
      if (read < batchSize) await sleepUnlessAborted(idleMs, this.stopping.signal);
    }
  }

  /** A round: the next batch appended and the checkpoints due signed, unless the service defers it; answers how many events of the log it consumed. */
  private async round(): Promise<number> {
    if (await this.options.deferWhile?.()) return 0;
    const read = await this.catchUp();
    await this.signDue();
    return read;
  }

  /**
   * Appends the next batch of the log to the trees; answers how many events of the log it consumed,
   * the ones left out of every tree (a repeated version, no organization) included: 0 when another
   * instance's keeper had taken the batch.
   */
  async catchUp(): Promise<number> {
    const { pool, store, batchSize = defaultBatchSize } = this.options;
    // Read before the transaction: an open transaction holding a transaction id would hold back
    // the PostgreSQL store's read watermark, and with it the projector, for as long as the read.
    const after = await readTreeProgress(pool);
    const events = await store.readAll(after, batchSize);
    if (events.length === 0) return 0;
    const leftOut: { event: { streamName: string; version: bigint }; reason: 'no_organization' | 'repeated_version' }[] = [];
    const consumed = await inTransaction(pool, async (client) => {
      // Another instance's keeper appended from there meanwhile: this batch is its, already.
      if (comparePositions(await lockProgress(client), after) !== 0) return 0;
      // An event at a version the tree holds already was put back into the log under the service
      // (deleted and inserted again, at a later position): evidence of tampering, not a new leaf,
      // and it must not stop the trees of every organization.
      const held = await leavesHeld(client, events);
      const unheld: RecordedEvent[] = [];
      for (const event of events) {
        if (held.has(leafKey(event.streamName, event.version))) leftOut.push({ event, reason: 'repeated_version' });
        else unheld.push(event);
      }
      const streams = await readStreamHeads(client, [...new Set(unheld.map((event) => event.streamName))]);
      const { leaves, heads, unplaced } = placeEvents(unheld, streams);
      for (const event of unplaced) leftOut.push({ event, reason: 'no_organization' });
      const byOrganization = new Map<string, PlacedLeaf[]>();
      for (const leaf of leaves) {
        const list = byOrganization.get(leaf.organizationId);
        if (list) list.push(leaf);
        else byOrganization.set(leaf.organizationId, [leaf]);
      }
      const sizes = await treeSizes(client, [...byOrganization.keys()]);
      // Every tree the batch grows, over edges read in one round trip: a batch of the log's events
      // touches many organizations.
      const sizeOf = (organizationId: string) => sizes.get(organizationId) ?? 0;
      const edges = await readNodesOfTrees(
        client,
        new Map([...byOrganization.keys()].map((organizationId) => [organizationId, frontier(sizeOf(organizationId))])),
      );
      const growth: TreeBatch['growth'] = [...byOrganization].map(([organizationId, organizationLeaves]) => ({
        organizationId,
        firstIndex: sizeOf(organizationId),
        leaves: organizationLeaves,
        nodes: appendLeaves(
          sizeOf(organizationId),
          organizationLeaves.map((leaf) => leaf.hash),
          lookupIn(edges.get(organizationId) ?? []),
        ),
      }));
      const last: GlobalPosition = events[events.length - 1]!.position;
      await saveTreeBatch(client, { growth, heads, progress: latestPosition([after, last])! });
      return events.length;
    });
    // Told once the batch is committed: a batch rolled back and read again is told once, then.
    if (consumed > 0) for (const { event, reason } of leftOut) this.tellLeftOut(event, reason);
    return consumed;
  }

  private tellLeftOut(event: { streamName: string; version: bigint }, reason: 'no_organization' | 'repeated_version'): void {
    this.options.onLeftOut?.(reason);
    const where = { stream: event.streamName, version: event.version.toString() };
    if (reason === 'no_organization')
      this.options.logger.warn(where, 'event of a stream with no organization left out of the integrity tree');
    else
      this.options.logger.error(
        where,
        'event at a version the integrity tree holds already left out of it: the event log was changed under the service (an event deleted and inserted again)',
      );
  }

  /** Signs a checkpoint of each tree that is due one. */
  async signDue(): Promise<void> {
    const { pool, key, now, before, checkpointIntervalMs } = this.options;
    const timestamp = now();
    for (const { organizationId, size } of await treesDueForCheckpoint(pool, before(timestamp, checkpointIntervalMs))) {
      const nodes = await readNodes(
        pool,
        organizationId,
        nodesRead((lookup) => rootHash(size, lookup)),
      );
      const root = rootHash(size, lookupIn(nodes)).toString('hex');
      await saveCheckpoint(pool, signCheckpoint({ organization_id: organizationId, size, root_hash: root, timestamp }, key));
    }
  }
}
