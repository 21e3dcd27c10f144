/**
 * A worker thread of `npm run audit:verify` (src/cli/audit-verify.ts) with events in PostgreSQL:
 * checks the streams of one range of names, each event with its leaf, joined by PostgreSQL as it
 * reads the log, in the log's snapshot; then names the leaves of the range no event met. It tells
 * the main thread once it has joined the snapshot (the main thread may then end the transaction
 * that exported it), then what it found.
 */
import { parentPort, workerData } from 'node:worker_threads';
import pg from 'pg';
import { joinLogSnapshot, readLogPart, type LogSnapshot, type StreamRange } from '../eventstore/postgres-stream-order.js';
import type { GlobalPosition } from '../eventstore/port.js';
import { connectionSettings } from '../infra/postgres.js';
import { leavesBeside, leafBeside, leavesWithoutEvent } from '../integrity/adapters/tables.js';
import { StreamOrderAudit, type Break, type StoredLeaf } from '../integrity/audit.js';

export type LogPartTask = { databaseUrl: string; treeEnd: GlobalPosition; log: LogSnapshot; range: StreamRange };
export type LogPartMessage = { kind: 'joined' } | { kind: 'checked'; breaks: Break[]; unmatched: StoredLeaf[]; events: number };

const task = workerData as LogPartTask;
const tell = (message: LogPartMessage) => parentPort!.postMessage(message);

const client = new pg.Client({ connectionString: task.databaseUrl, ...connectionSettings });
await client.connect();
await joinLogSnapshot(client, task.log);
tell({ kind: 'joined' });
const audit = new StreamOrderAudit(task.treeEnd);
const breaks: Break[] = [];
const unmatched = await readLogPart(client, task.log, task.range, leavesBeside, async (pages) => {
  for await (const page of pages) for (const { event, row } of page) breaks.push(...audit.check(event, leafBeside(event, row)));
  return leavesWithoutEvent(client, task.log, task.range, audit.matched);
});
await client.end();
tell({ kind: 'checked', breaks, unmatched, events: audit.events });
