import pg from 'pg';
import type { Logger } from 'pino';
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../src/infra/embedded-postgres.js';

/** The URL of database `name` on the server `serverUrl` names (its credentials and options kept). */
export function databaseUrl(serverUrl: string, name: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/**
 * The end of a bench's own database: dropped unless the run keeps it (`--keep`, or `--database`
 * named one to reuse), then the admin connection closed and an embedded server stopped if unused.
 * A backend outlives its closed connection by a moment: ours are let go before the drop, and
 * before `stop`, which leaves the server running while other clients are connected.
 */
export async function finishBenchDatabase(options: {
  admin: pg.Client;
  name: string;
  keep: boolean;
  embedded: EmbeddedDatabase | undefined;
  out: (line: string) => void;
  /** How to use the database kept, when not the bench's `--database` option. */
  reuse?: string;
}): Promise<void> {
  const { admin, name, keep, embedded, out } = options;
  const settle = () => new Promise((resolve) => setTimeout(resolve, 250));
  await settle();
  if (keep) out(`kept database ${name} (${options.reuse ?? `reuse: --database ${name}`})`);
  else await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.end();
  await settle();
  await embedded?.stop();
}

/**
 * A bench's own database, named `name` (validated: it goes into SQL as it is), on DATABASE_URL's
 * server or else an embedded one on DATA_DIR (default `defaultDataDir`); created unless it exists.
 * An invalid name ends the process with `usage`.
 */
export async function openBenchDatabase(options: { name: string; usage: string; defaultDataDir: string; logger: Logger }): Promise<{
  embedded: EmbeddedDatabase | undefined;
  admin: pg.Client;
  databaseUrl: string;
}> {
  const { name, usage, defaultDataDir, logger } = options;
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) {
    process.stderr.write(`not a plain database name: ${name}\n${usage}`);
    process.exit(2);
  }
  const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres(process.env.DATA_DIR || defaultDataDir, logger);
  const serverUrl = process.env.DATABASE_URL ?? embedded!.url;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  if ((await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount === 0) {
    await admin.query(`CREATE DATABASE ${name}`);
  }
  return { embedded, admin, databaseUrl: databaseUrl(serverUrl, name) };
}
