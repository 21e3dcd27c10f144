import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import pino from 'pino';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres } from '../../src/infra/embedded-postgres.js';
import { dockerAnswers } from './eventstoredb-container.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A PostgreSQL server for the run; each test file creates its own database on it. */
    adminDatabaseUrl: string;
    postgresSource: string;
    /** What the name of every database the run creates starts with (test/support/database.ts). */
    testDatabasePrefix: string;
  }
}

type TestPostgres = { adminDatabaseUrl: string; source: string; databasePrefix: string; stop: () => Promise<void> };

/**
 * One PostgreSQL server for the whole run, shared by every vitest project (each runs this setup):
 * the first starts it, the last to tear down stops it.
 */
const shared = globalThis as { testPostgres?: { server: Promise<TestPostgres>; users: number } };

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  shared.testPostgres ??= { server: startPostgres(), users: 0 };
  const entry = shared.testPostgres;
  entry.users += 1;
  const server = await entry.server;
  project.provide('adminDatabaseUrl', server.adminDatabaseUrl);
  project.provide('postgresSource', server.source);
  project.provide('testDatabasePrefix', server.databasePrefix);
  return async () => {
    entry.users -= 1;
    if (entry.users > 0) return;
    shared.testPostgres = undefined;
    await server.stop();
  };
}

/**
 * DATABASE_URL when set, else a testcontainers container when a Docker engine answers, else
 * the embedded PostgreSQL on a free port in a temporary directory.
 */
async function startPostgres(): Promise<TestPostgres> {
  const databasePrefix = `test_${randomBytes(4).toString('hex')}_`;
  if (process.env.DATABASE_URL) {
    const adminDatabaseUrl = process.env.DATABASE_URL;
    // A server the run does not own: the databases it made there go with it.
    return { adminDatabaseUrl, source: 'DATABASE_URL', databasePrefix, stop: () => dropDatabases(adminDatabaseUrl, databasePrefix) };
  }
  if (await dockerAnswers()) {
    const { GenericContainer, Wait } = await import('testcontainers');
    const container = await new GenericContainer('postgres:17-alpine')
      .withEnvironment({ POSTGRES_PASSWORD: 'test' })
      .withCommand(['postgres', '-c', 'max_connections=300', '-c', 'fsync=off'])
      .withExposedPorts(5432)
      .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
      .start();
    return {
      adminDatabaseUrl: `postgresql://postgres:test@${container.getHost()}:${container.getMappedPort(5432)}/postgres`,
      source: 'testcontainers',
      databasePrefix,
      stop: async () => {
        await container.stop();
      },
    };
  }
  // The service's own embedded server, started the same way (its initdb in a process of its own,
  // so nothing registers exit handlers in vitest's process that would override its exit code).
  const directory = mkdtempSync(path.join(tmpdir(), 'wsapi-test-pg-'));
  const server = await startEmbeddedPostgres(directory, pino({ level: 'silent' }), { max_connections: '300', fsync: 'off' });
  return {
    adminDatabaseUrl: server.url,
    source: 'embedded-postgres',
    databasePrefix,
    stop: async () => {
      await server.forceStop();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

/** Drops the databases whose names start with `prefix` (made by this run), closing what is still connected to them. */
async function dropDatabases(adminDatabaseUrl: string, prefix: string): Promise<void> {
  const admin = new pg.Client({ connectionString: adminDatabaseUrl });
  await admin.connect();
  try {
    const { rows } = await admin.query<{ datname: string }>('SELECT datname FROM pg_database WHERE starts_with(datname, $1)', [prefix]);
    for (const { datname } of rows) await admin.query(`DROP DATABASE IF EXISTS ${admin.escapeIdentifier(datname)} WITH (FORCE)`);
  } finally {
    await admin.end();
  }
}
