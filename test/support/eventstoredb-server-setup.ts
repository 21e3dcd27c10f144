import type { TestProject } from 'vitest/node';
import { startEventStoreDBContainer } from './eventstoredb-container.js';

/**
 * A real EventStoreDB for the `eventstoredb-server` project: EVENTSTORE_URL when set (use a
 * throwaway node: the suites write test streams), else one testcontainers node for the run.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  if (process.env.EVENTSTORE_URL) {
    project.provide('eventStoreServerUrl', process.env.EVENTSTORE_URL);
    return async () => undefined;
  }
  const container = await startEventStoreDBContainer();
  project.provide('eventStoreServerUrl', container.url);
  return container.stop;
}
