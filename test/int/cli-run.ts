import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export type CliOutcome = { code: number; stdout: string; stderr: string };

/**
 * Runs one of the operator CLIs (src/cli/*.ts) as `npm run` would, through tsx, against the given
 * database only: no token settings, no EventStoreDB, not on a terminal.
 */
export function runCli(script: string, args: string[], databaseUrl: string, extraEnv: NodeJS.ProcessEnv = {}): Promise<CliOutcome> {
  const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' };
  for (const name of ['AUTH_JWT_SECRET', 'AUTH_JWKS_URL', 'EVENTSTORE_URL', 'NODE_OPTIONS']) delete env[name];
  Object.assign(env, extraEnv);
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', path.join(repoRoot, script), ...args],
      { cwd: repoRoot, env, timeout: 120_000, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}
