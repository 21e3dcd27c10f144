import { existsSync } from 'node:fs';

/** Whether a Docker engine answers; checked cheaply before loading testcontainers at all. */
export async function dockerAnswers(): Promise<boolean> {
  if (!process.env.DOCKER_HOST && !existsSync('/var/run/docker.sock')) return false;
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}

const image = process.env.EVENTSTORE_IMAGE ?? 'eventstore/eventstore:24.10';

/** A throwaway single EventStoreDB node in memory, insecure, once it serves reads as leader. */
export async function startEventStoreDBContainer(): Promise<{ url: string; stop: () => Promise<void> }> {
  const { GenericContainer, Wait } = await import('testcontainers');
  const container = await new GenericContainer(image)
    .withEnvironment({ EVENTSTORE_INSECURE: 'true', EVENTSTORE_RUN_PROJECTIONS: 'None', EVENTSTORE_MEM_DB: 'true' })
    .withExposedPorts(2113)
    .withWaitStrategy(Wait.forHttp('/health/live', 2113).forStatusCodeMatching((status) => status >= 200 && status < 300))
    .withStartupTimeout(180_000)
    .start();
  // Built by hand: @testcontainers/kurrentdb answers kurrentdb://, which this client does not parse.
  return {
    url: `esdb://${container.getHost()}:${container.getMappedPort(2113)}?tls=false`,
    stop: async () => {
      await container.stop();
    },
  };
}
