import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { mintToken } from '../../src/api/tokens.js';
import { freePort } from '../../src/infra/embedded-postgres.js';
import { stopWithThisProcess } from './child-processes.js';
import { testSecret } from './secret.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** Node's options as `npm start` gives them (package.json's `exec node … src/main.ts`): tests and benches run the service as users do. */
const startOptions: string[] = (() => {
  const { scripts } = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: { start: string } };
  const words = scripts.start.split(' ');
  return words.slice(words.indexOf('node') + 1, words.indexOf('src/main.ts'));
})();

export type ServiceProcess = {
  url: string;
  pid: number;
  child: ChildProcess;
  /** What the process wrote to stdout and stderr (its logs), for a failing test to show. */
  output: () => string;
  token: (organizations: string[], subject?: string) => Promise<string>;
  /** Sends `signal` and, unless it only pauses or resumes the process, waits for it to exit. */
  signal: (signal: NodeJS.Signals) => Promise<void>;
};

/**
 * The service as its own operating-system process (`src/main.ts`, as `npm start` runs it), on a
 * given read database and event store, for tests that kill, freeze and resume it.
 */
export async function startServiceProcess(options: {
  databaseUrl: string;
  eventStoreUrl?: string | undefined;
  env?: Record<string, string>;
}): Promise<ServiceProcess> {
  const port = await freePort();
  // SERVICE_NODE_ARGS: Node options for the service alone, such as `--cpu-prof` to profile it under a bench (NODE_OPTIONS refuses that one).
  const nodeArgs = process.env.SERVICE_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  const child = spawn(process.execPath, [...nodeArgs, ...startOptions, 'src/main.ts'], {
    cwd: root,
    env: {
      ...process.env,
      DATABASE_URL: options.databaseUrl,
      AUTH_JWT_SECRET: testSecret,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'warn',
      ...(options.eventStoreUrl ? { EVENTSTORE_URL: options.eventStoreUrl } : { EVENTSTORE_URL: '' }),
      ...options.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  stopWithThisProcess(child);
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) =>
    child.once('exit', (code, signal) => {
      output += `\n[process exited: code ${code}, signal ${signal}]\n`;
      resolve();
    }),
  );
  const url = `http://127.0.0.1:${port}`;

  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the service process exited at start:\n${output}`);
    const healthy = await fetch(`${url}/healthz`).then(
      (response) => response.ok,
      () => false,
    );
    if (healthy) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`the service process did not start in time:\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }

  return {
    url,
    pid: child.pid!,
    child,
    output: () => output,
    token: (organizations, subject = 'user-1') => mintToken(testSecret, { subject, organizations }),
    signal: async (signal) => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill(signal);
      if (signal !== 'SIGSTOP' && signal !== 'SIGCONT') await exited;
    },
  };
}
