/**
 * A worker thread of `npm run audit:verify` (src/cli/audit-verify.ts) with events in PostgreSQL:
 * checks the streams of one range of names, their events from the log's snapshot against their
 * leaves from the trees' snapshot. It tells the main thread once it has joined both snapshots (the
 * main thread may then end the transactions that exported them), then what it found.
 */
import { parentPort, workerData } from 'node:worker_threads';
import pg from 'pg';
import { joinLogSnapshot, readLogPart, type LogSnapshot, type StreamRange } from '../eventstore/postgres-stream-order.js';
import type { GlobalPosition } from '../eventstore/port.js';
import { connectionSettings, joinSnapshot } from '../infra/postgres.js';
import { readRangeLeaves } from '../integrity/adapters/tables.js';
import { LogAudit, type Break, type StoredLeaf } from '../integrity/audit.js';

export type LogPartTask = { databaseUrl: string; treeSnapshotId: string; treeEnd: GlobalPosition; log: LogSnapshot; range: StreamRange };
export type LogPartMessage = { kind: 'joined' } | { kind: 'checked'; breaks: Break[]; unmatched: StoredLeaf[]; events: number };

const task = workerData as LogPartTask;
const tell = (message: LogPartMessage) => parentPort!.postMessage(message);
const connect = async () => {
  const client = new pg.Client({ connectionString: task.databaseUrl, ...connectionSettings });
  await client.connect();
  return client;
};

const [treeClient, logClient] = await Promise.all([connect(), connect()]);
await joinSnapshot(treeClient, task.treeSnapshotId);
await joinLogSnapshot(logClient, task.log);
tell({ kind: 'joined' });
const audit = new LogAudit(await readRangeLeaves(treeClient, task.range), task.treeEnd);
await treeClient.query('COMMIT');
await treeClient.end();
const breaks: Break[] = [];
await readLogPart(logClient, task.log, task.range, async (pages) => {
  for await (const events of pages) for (const event of events) breaks.push(...audit.check(event));
});
await logClient.end();
tell({ kind: 'checked', breaks, unmatched: audit.unmatchedLeaves(), events: audit.events });
