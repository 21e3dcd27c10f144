import type { ChildProcess } from 'node:child_process';

/**
 * Processes a test or bench started (the service, the EventStoreDB stand-in) and that still run.
 * One that dies (an uncaught error) runs no `finally`: each is told to stop as it exits, or it
 * would run on, on its port and its database, into the next run's figures. SIGCONT too, for one
 * frozen by a test.
 */
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) {
    child.kill('SIGTERM');
    child.kill('SIGCONT');
  }
});

/** Stops `child` when this process exits, unless it has exited first. */
export function stopWithThisProcess(child: ChildProcess): void {
  running.add(child);
  child.once('exit', () => running.delete(child));
}
