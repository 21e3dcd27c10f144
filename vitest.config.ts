import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { defineConfig, type TestProjectInlineConfiguration } from 'vitest/config';

/**
 * The suites that depend on where events are stored run once per event store: the HTTP suite and
 * the projector's crash, failover and catch-up tests.
 */
const perEventStore = [
  'test/e2e/**/*.e2e.test.ts',
  'test/int/projections/projector-failures.int.test.ts',
  'test/int/projections/catch-up-cache.int.test.ts',
  'test/int/projections/live-reads.int.test.ts',
  'test/int/write/group-commit.int.test.ts',
  'test/int/write/load-record.int.test.ts',
  'test/int/write/answer-turns.int.test.ts',
];

/** A real EventStoreDB is used when EVENTSTORE_URL names one or a Docker engine may start one (checked again in its setup). */
/** One PostgreSQL server for the run (test/support/global-setup.ts), for every project that needs one. */
const postgres = 'test/support/global-setup.ts';

const realEventStoreDB = Boolean(process.env.EVENTSTORE_URL || process.env.DOCKER_HOST || existsSync('/var/run/docker.sock'));

const project = (name: string, include: string[], extra: TestProjectInlineConfiguration['test'] = {}): TestProjectInlineConfiguration => ({
  extends: true,
  test: { name, include, ...extra },
});

export default defineConfig({
  test: {
    setupFiles: ['test/support/stand-in-lifecycle.ts'],
    pool: 'forks',
    // At least two files at a time, where Vitest would run one on two cores: most of a file's time
    // is spent waiting on service processes and PostgreSQL (a two-core machine: 1,280 s one at a
    // time, 836 s two at a time, the same 146 files passing).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    testTimeout: 60_000,
    hookTimeout: 120_000,
    reporters: ['default', './test/support/summary-reporter.ts'],
    projects: [
      // Pure code and the app on the in-memory event store: no PostgreSQL to start, done in seconds.
      project('unit', ['test/unit/**/*.unit.test.ts']),
      project('int', ['test/int/**/*.int.test.ts'], { globalSetup: [postgres] }),
      project('e2e', ['test/e2e/**/*.e2e.test.ts'], { globalSetup: [postgres] }),
      // Events in EventStoreDB, read tables in PostgreSQL, as in production: against the wire-level
      // stand-in on every run, and against a real server wherever one can be had.
      project('eventstoredb', perEventStore, { env: { TEST_EVENT_STORE: 'eventstoredb-standin' }, globalSetup: [postgres] }),
      ...(realEventStoreDB
        ? [
            project('eventstoredb-server', perEventStore.slice(0, 1), {
              env: { TEST_EVENT_STORE: 'eventstoredb-server' },
              globalSetup: [postgres, 'test/support/eventstoredb-server-setup.ts'],
              // One server for the run: files take turns, each reading only the events it wrote.
              fileParallelism: false,
            }),
          ]
        : []),
    ],
  },
});
