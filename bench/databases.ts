/** The URL of database `name` on the server `serverUrl` names (its credentials and options kept). */
export function databaseUrl(serverUrl: string, name: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}
