import type { Logger } from 'pino';
import type { EventStore, GlobalPosition } from '../../eventstore/port.js';

export type RebuildProgress = {
  phase: 'copying' | 'switching' | 'done';
  /** Events read from the log so far (all of them, also those of streams the projection ignores). */
  done: number;
  /** An estimate of the log's length, when the store can give one; never below `done`. */
  total: number | undefined;
  elapsedMs: number;
};

export type RebuildOptions = {
  connectionString: string;
  store: EventStore;
  logger: Logger;
  /** Events read and applied per batch (default 20,000). */
  batchSize?: number;
  /** An estimate of the number of events in the log, for progress; undefined when unknown. */
  estimateTotal?: () => Promise<number | undefined>;
  onProgress?: (progress: RebuildProgress) => void;
  /** Stops the rebuild between batches; the live tables stay as they were. */
  signal?: AbortSignal;
  /** Called each time the rebuild has caught up, just before it tries to switch over (tests). */
  beforeSwitch?: () => Promise<void>;
  /**
   * Rows kept in memory between batches (default 250,000), so that most batches read none from
   * the tables; those not kept are read back. Only the rebuild writes its tables, so a kept row
   * is always current.
   */
  cachedRows?: number;
  /** How many times to try taking the live tables' locks before giving up (default 200). */
  maxSwitchAttempts?: number;
};

export type RebuildResult = {
  schema: string;
  /** Whether the first pass was the bulk load (the store reads its log stream by stream), not the batch copy. */
  bulk: boolean;
  /** Where the time went: the first pass over the log, the deferred index builds (and ANALYZE), the catch-up after them, the switch (with its retries). */
  phases: { loadMs: number; indexesMs: number; catchUpMs: number; switchMs: number };
  /** Events read from the log. */
  events: number;
  /** The live checkpoint before the switch and the one the rebuilt tables are at. */
  previousPosition: GlobalPosition;
  position: GlobalPosition;
  /** Tables moved into `public`. */
  tables: string[];
  /** Cascades still to do that were added to cascade_pending. */
  pendingCascades: number;
  switchAttempts: number;
  elapsedMs: number;
  eventsPerSecond: number;
};

export class RebuildAborted extends Error {
  constructor() {
    super('the rebuild was stopped; the live tables are unchanged');
    this.name = 'RebuildAborted';
  }
}

/** How far the copy has got. */
export type CopyState = {
  position: GlobalPosition;
  done: number;
  batches: number;
  /**
   * Solutions hidden with their workspace whose own SolutionDeleted is not in the log yet (the
   * cascade worker's to-do list as the log stands), by solution id, with their workspace id.
   */
  cascades: Map<string, string>;
};
