import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { pino, type Logger } from 'pino';
import { mintToken } from '../../src/api/tokens.js';
import { parseConfig } from '../../src/config.js';
import { buildServiceApp, startRuntime, type Runtime, type RuntimeOptions } from '../../src/runtime/service.js';
import { createTestDatabase } from './database.js';
import { conformingFetch } from './openapi-conformance.js';
import { testSecret } from './secret.js';

export { testSecret };
import { eventStoreUrlFor, prepareReadDatabase } from './event-store.js';

export type TestService = {
  url: string;
  databaseUrl: string;
  app: FastifyInstance;
  runtime: Runtime;
  token: (organizations: string[], scope?: string, subject?: string) => Promise<string>;
  close: () => Promise<void>;
};

export type TestServiceOptions = RuntimeOptions & {
  databaseUrl?: string;
  /** The EventStoreDB to use instead of the mode's own for `databaseUrl` (for example through a proxy). */
  eventStoreUrl?: string;
  env?: Record<string, string>;
  /** The service's logger (default: pino at TEST_LOG_LEVEL, silent unless set). */
  logger?: Logger;
};

/** The real service on a real HTTP port and a fresh database (or a given one, for a second instance). */
export async function startTestService(options: TestServiceOptions = {}): Promise<TestService> {
  const databaseUrl = options.databaseUrl ?? (await prepareReadDatabase(await createTestDatabase()));
  // In the EventStoreDB projects the whole HTTP suite runs with events in EventStoreDB.
  const eventStoreUrl = options.eventStoreUrl ?? (await eventStoreUrlFor(databaseUrl));
  const config = parseConfig({
    DATABASE_URL: databaseUrl,
    AUTH_JWT_SECRET: testSecret,
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    ...(eventStoreUrl ? { EVENTSTORE_URL: eventStoreUrl } : {}),
    ...options.env,
  });
  const logger = options.logger ?? pino({ level: config.logLevel });
  const runtime = await startRuntime(config, logger, options);
  const app = await buildServiceApp(config, runtime, logger);
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    databaseUrl,
    app,
    runtime,
    token: (organizations, scope, subject = 'user-1') =>
      mintToken(testSecret, { subject, organizations, ...(scope === undefined ? {} : { scope }) }),
    close: async () => {
      await app.close();
      await runtime.close();
    },
  };
}

export type ApiResponse = { status: number; headers: Headers; body: any };

/** Calls `POST /api` as a client would. */
export async function callApi(
  service: Pick<TestService, 'url'>,
  token: string | undefined,
  query: string,
  params: unknown,
  headers: Record<string, string> = {},
): Promise<ApiResponse> {
  const response = await conformingFetch(`${service.url}/api`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
      ...headers,
    },
    body: JSON.stringify({ query, params }),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, body: text ? JSON.parse(text) : undefined };
}
