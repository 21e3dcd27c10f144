/**
 * npm run projections:rebuild [-- --batch-size 20000]
 *
 * Rebuilds every read table from the event log without stopping the service (see
 * src/projections/rebuild/index.ts). Uses the service's settings: DATABASE_URL or the embedded
 * PostgreSQL on DATA_DIR (shared with a running service), and EVENTSTORE_URL when set.
 * Progress goes to stderr: a progress bar on a terminal, a line every few seconds otherwise.
 */
import { encodePosition } from '../eventstore/port.js';
import { RebuildAborted, rebuildReadModel, type RebuildProgress } from '../projections/rebuild/index.js';
import { connectOperator, operatorSetup } from './operator.js';
import { commandLine, usageError } from './arguments.js';

const tool = 'npm run projections:rebuild';
const usage = `usage: npm run projections:rebuild [-- --batch-size <events>]

Rebuilds every read table from the event log while the service keeps answering, then switches
over in one short transaction. Uses the service's settings: DATABASE_URL or the embedded
PostgreSQL in DATA_DIR (shared with a running service), and EVENTSTORE_URL when set. Progress
goes to stderr; Ctrl-C stops after the current batch and leaves the live tables as they were.

  --batch-size <n>  events folded per batch (default: 20000)
  -h, --help        this text
`;
/** A batch is held in memory while it is folded: a larger one only costs memory. */
const maxBatchSize = 1_000_000;
const { values } = commandLine(tool, usage, { 'batch-size': { type: 'string', default: '20000' } });
const batchSize = Number(values['batch-size']);
if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > maxBatchSize) {
  usageError(tool, `--batch-size must be a whole number from 1 to ${maxBatchSize}`);
}

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
const duration = (seconds: number) => {
  if (!Number.isFinite(seconds)) return '?';
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const pad = (n: number) => String(n).padStart(2, '0');
  return h > 0 ? `${h}:${pad(m)}:${pad(s % 60)}` : `${m}:${pad(s % 60)}`;
};

/** A progress bar redrawn in place on a terminal; a plain line every few seconds otherwise. */
function progressPrinter(stream: NodeJS.WriteStream) {
  const tty = stream.isTTY === true;
  let lastPrint = Number.NEGATIVE_INFINITY;
  let drawn = false;
  let switchAnnounced = false;
  const describe = ({ done, total, elapsedMs, phase }: RebuildProgress, bar: boolean) => {
    const rate = elapsedMs > 0 ? (done / elapsedMs) * 1000 : 0;
    const rateText = `${integer.format(rate)} events/s`;
    const label = phase === 'switching' ? 'switching over' : phase === 'done' ? 'done' : 'rebuilding';
    if (total === undefined || total === 0)
      return `${label}: ${integer.format(done)} events, ${rateText}, ${duration(elapsedMs / 1000)} elapsed`;
    const fraction = Math.min(1, done / total);
    const left = rate > 0 ? duration((total - done) / rate) : '?';
    const percent = `${(fraction * 100).toFixed(1).padStart(5)}%`;
    const counts = `${integer.format(done)}/${integer.format(total)} events`;
    if (!bar) return `${label}: ${counts} (${percent.trim()}), ${rateText}, ${left} left`;
    const width = Math.max(10, Math.min(40, (stream.columns ?? 80) - 70));
    const filled = Math.round(fraction * width);
    return `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${percent} ${counts}  ${rateText}  ${left} left  ${label}`;
  };
  return {
    update(progress: RebuildProgress) {
      const now = performance.now();
      const final = progress.phase === 'done';
      if (tty) {
        if (!final && now - lastPrint < 100) return;
        lastPrint = now;
        stream.write(`\r\x1b[2K${describe(progress, true)}`);
        drawn = true;
        if (final) {
          stream.write('\n');
          drawn = false;
        }
      } else {
        // A line every two seconds, the first attempt to switch over, and the end.
        const firstSwitch = progress.phase === 'switching' && !switchAnnounced;
        if (!final && !firstSwitch && now - lastPrint < 2000) return;
        if (firstSwitch) switchAnnounced = true;
        lastPrint = now;
        stream.write(`${describe(progress, false)}\n`);
      }
    },
    /** Ends a half-drawn bar so that what follows starts on its own line. */
    interrupt() {
      if (drawn) stream.write('\n');
      drawn = false;
    },
  };
}

const printer = progressPrinter(process.stderr);
const abort = new AbortController();
const stop = () => {
  printer.interrupt();
  process.stderr.write('stopping after the current batch…\n');
  abort.abort();
};
const { config, logger } = operatorSetup(stop);

let exitCode = 0;
let connection;
try {
  // A fresh read database is what a rebuild fills when events are in EventStoreDB; with events in
  // PostgreSQL, a database the service never ran on has no log either: a mistyped DATABASE_URL.
  connection = await connectOperator(config, logger, { requireSchema: config.eventStoreUrl === undefined });
  const result = await rebuildReadModel({
    connectionString: connection.databaseUrl,
    store: connection.store,
    logger,
    batchSize,
    estimateTotal: connection.estimateTotal,
    onProgress: (progress) => printer.update(progress),
    signal: abort.signal,
  });
  printer.interrupt();
  process.stdout.write(
    `rebuilt ${result.tables.join(', ')} from ${integer.format(result.events)} events in ${(result.elapsedMs / 1000).toFixed(1)} s ` +
      `(${integer.format(result.eventsPerSecond)} events/s); checkpoint ${encodePosition(result.previousPosition)} -> ` +
      `${encodePosition(result.position)}; ${result.pendingCascades} cascade(s) still to do\n`,
  );
} catch (error) {
  printer.interrupt();
  process.stderr.write(`rebuild failed: ${error instanceof Error ? error.message : String(error)}\n`);
  // Interrupted before the rebuild began (while connecting), it is as interrupted as during it.
  exitCode = error instanceof RebuildAborted || abort.signal.aborted ? 130 : 2;
} finally {
  // The outcome is already printed; the process exits next, closing whatever is left.
  await connection?.close().catch(() => undefined);
}
process.exit(exitCode);
