import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { stopWithThisProcess } from '../test/support/child-processes.js';

/** The EventStoreDB stand-in in a process of its own (test/support/eventstoredb-standin/serve.ts): its connection string, and how to stop it. */
export type StandInProcess = { url: string; stop: () => Promise<void> };

export async function startStandInProcess(): Promise<StandInProcess> {
  // STANDIN_NODE_ARGS: Node options for the stand-in alone, such as `--cpu-prof` (NODE_OPTIONS refuses that one).
  const nodeArgs = process.env.STANDIN_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  const child = spawn(process.execPath, [...nodeArgs, '--import', 'tsx', 'test/support/eventstoredb-standin/serve.ts'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  stopWithThisProcess(child);
  const lines = createInterface({ input: child.stdout });
  const [url] = (await Promise.race([
    once(lines, 'line'),
    once(child, 'exit').then(([code]) => {
      throw new Error(`the EventStoreDB stand-in exited (${String(code)}) before it listened`);
    }),
  ])) as [string];
  return {
    url,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      await exited;
    },
  };
}
