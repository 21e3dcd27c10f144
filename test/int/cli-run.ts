import { execFile, spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export type CliOutcome = { code: number; stdout: string; stderr: string };

/** The environment a CLI runs with here: the given database only, no token settings, no EventStoreDB. */
function cliEnvironment(databaseUrl: string, extraEnv: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' };
  for (const name of ['AUTH_JWT_SECRET', 'AUTH_JWKS_URL', 'EVENTSTORE_URL', 'NODE_OPTIONS']) delete env[name];
  return Object.assign(env, extraEnv);
}

/**
 * Runs one of the operator CLIs (src/cli/*.ts) as `npm run` would, through tsx, against the given
 * database only: no token settings, no EventStoreDB, not on a terminal.
 */
export function runCli(script: string, args: string[], databaseUrl: string, extraEnv: NodeJS.ProcessEnv = {}): Promise<CliOutcome> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', path.join(repoRoot, script), ...args],
      { cwd: repoRoot, env: cliEnvironment(databaseUrl, extraEnv), timeout: 120_000, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/** The same CLI as a process to send signals to: started, not waited for. */
export function startCli(script: string, args: string[], databaseUrl: string, extraEnv: NodeJS.ProcessEnv = {}): ChildProcess {
  return spawn(process.execPath, ['--import', 'tsx', path.join(repoRoot, script), ...args], {
    cwd: repoRoot,
    env: cliEnvironment(databaseUrl, extraEnv),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}
