export type StopSignal = 'SIGINT' | 'SIGTERM';

/**
 * How close together two signals count as one request to stop. A terminal's Ctrl-C reaches the
 * whole foreground process group, and `npm start` (like any `npm run`) forwards the signal it gets
 * to its script as well: one press arrives twice, a few milliseconds apart.
 */
const repeatedSignalWindowMs = 1000;

/**
 * Calls `stop` on the first SIGINT or SIGTERM and keeps the process alive while it runs (Node's
 * default would end the process at once). A repeat within {@link repeatedSignalWindowMs} is the
 * same request; a later one is a person asking again: `forceStop` runs, and the process exits at
 * once with 128 + the signal's number, after saying so on stderr.
 */
export function onStopSignal(stop: (signal: StopSignal) => unknown, forceStop: (signal: StopSignal) => void = () => undefined): void {
  let firstAt: number | undefined;
  const handle = (signal: StopSignal) => {
    if (firstAt === undefined) {
      firstAt = Date.now();
      stop(signal);
      return;
    }
    if (Date.now() - firstAt < repeatedSignalWindowMs) return;
    process.stderr.write(`${signal} again: stopping at once, without waiting for the work in progress\n`);
    forceStop(signal);
    process.exit(signal === 'SIGINT' ? 130 : 143);
  };
  process.on('SIGINT', handle);
  process.on('SIGTERM', handle);
}
