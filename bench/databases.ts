import type pg from 'pg';
import type { EmbeddedDatabase } from '../src/infra/embedded-postgres.js';

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
}): Promise<void> {
  const { admin, name, keep, embedded, out } = options;
  const settle = () => new Promise((resolve) => setTimeout(resolve, 250));
  await settle();
  if (keep) out(`kept database ${name} (reuse: --database ${name})`);
  else await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.end();
  await settle();
  await embedded?.stop();
}
