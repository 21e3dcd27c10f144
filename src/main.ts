import { answerHttpEdges, requestIdFrom } from './api/app.js';
import { errorBody } from './api/errors.js';
import { allScopes, mintToken } from './api/tokens.js';
import { ConfigError, defaultDataDir, parseConfig } from './config.js';
import { createLogger } from './infra/logger.js';
import { onStopSignal, type StopSignal } from './infra/stop-signals.js';
import { startMetricsServer, type MetricsServer } from './observability/metrics-server.js';
import { startConfiguredTracing } from './observability/tracing.js';
import { buildServiceApp, startRuntime } from './runtime/service.js';

/** The organization of the development token printed in embedded mode. */
const developmentOrganization = 'org_dev';
/** After the requests' drain time, what the stop may take to close the pools, the projector and PostgreSQL before it gives up. */
const stopAfterDrainMs = 5_000;
/** After the stop, how long the process may take to exit by itself (its logs written out) before it is made to. */
const exitAfterStopMs = 1_000;

async function main(): Promise<void> {
  let config;
  try {
    config = parseConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  // Before anything else: the request spans need the provider's context manager in place.
  const tracing = await startConfiguredTracing(config.tracing);
  const logger = createLogger(config.logLevel);
  // Listening from the start: a signal during start-up (an embedded PostgreSQL may be starting for
  // this process) stops the service as soon as it has started, rather than leaving that database behind.
  let stopRequest: StopSignal | undefined;
  let shutdown: ((signal: StopSignal | 'listen failed' | 'metrics listener failed') => Promise<void>) | undefined;
  onStopSignal(
    (signal) => {
      stopRequest = signal;
      return shutdown?.(signal);
    },
    (signal) =>
      logger.warn(
        { signal },
        config.databaseUrl ? 'forced stop' : 'forced stop: the embedded PostgreSQL is left running, and the next start uses it',
      ),
  );
  const runtime = await startRuntime(config, logger);
  const app = await buildServiceApp(config, runtime, logger);
  let metricsServer: MetricsServer | undefined;

  let stopping = false;
  shutdown = async (signal) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    // What the stop is doing: named when it takes too long, so that an operator knows what held it.
    let step = 'finishing the requests in flight';
    const forced = setTimeout(() => {
      logger.error({ step }, `shutdown took too long (held while ${step}); exiting`);
      process.exit(1);
    }, config.shutdownDrainMs + stopAfterDrainMs).unref();
    try {
      await app.close(); // stops accepting, finishes in-flight requests
      step = 'closing the metrics listener';
      await metricsServer?.close();
      await runtime.close((next) => (step = next));
      step = 'exporting the last traces';
      await tracing?.shutdown(); // exports the spans still buffered
      clearTimeout(forced);
      logger.info('stopped');
    } catch (error) {
      logger.error({ err: error }, 'error during shutdown');
      process.exitCode = 1;
    }
    // Everything the service opened is closed: a handle a library keeps open after (the EventStoreDB
    // client's connection to a node that never answered) must not keep the process alive.
    setTimeout(() => process.exit(), exitAfterStopMs).unref();
  };
  if (stopRequest) return shutdown(stopRequest);

  let address: string;
  try {
    address = await app.listen({ port: config.port, host: config.host });
  } catch (error) {
    process.stderr.write(
      (error as NodeJS.ErrnoException).code === 'EADDRINUSE'
        ? `port ${config.port} on ${config.host} is already in use: set PORT to a free port (for example PORT=${config.port + 1} npm start)\n`
        : `cannot listen on ${config.host} port ${config.port} (${(error as Error).message})` +
            (['EADDRNOTAVAIL', 'ENOTFOUND', 'EAI_AGAIN', 'EAI_NONAME'].includes((error as NodeJS.ErrnoException).code ?? '')
              ? ': set HOST to an address of this machine\n'
              : '\n'),
    );
    await shutdown('listen failed');
    process.exit(1);
  }
  logger.info({ address }, 'listening');
  if (config.metrics.port !== undefined) {
    try {
      metricsServer = await startMetricsServer(
        runtime.services.metrics,
        {
          port: config.metrics.port,
          host: config.metrics.host,
          requestIdOf: requestIdFrom,
          errorBody,
          answerHttpEdges,
        },
        logger,
      );
    } catch (error) {
      process.stderr.write(`metrics could not listen on ${config.metrics.host}:${config.metrics.port}: ${(error as Error).message}\n`);
      await shutdown('metrics listener failed');
      process.exit(1);
    }
    logger.info({ address: metricsServer.url }, 'metrics listening');
  }

  if (!config.databaseUrl && runtime.auth.kind === 'secret' && !config.auth.jwtSecret) {
    const token = await mintToken(runtime.auth.secret, {
      subject: 'dev-user',
      organizations: [developmentOrganization],
      scope: allScopes,
      expiresIn: '30d',
      issuer: config.auth.issuer,
      audience: config.auth.audience,
    });
    process.stdout.write(
      [
        '',
        `Workspace & Solution API on ${address}/api (embedded PostgreSQL, data in ${config.dataDir})`,
        `API reference: ${address}/docs (OpenAPI document: ${address}/openapi.json)`,
        `Development token (organization ${developmentOrganization}, all scopes, valid 30 days):`,
        '',
        `export TOKEN=${token}`,
        '',
        `More tokens: ${config.dataDir === defaultDataDir ? '' : `DATA_DIR=${config.dataDir} `}npm run -s token -- --org org_other --scope "workspaces:read"`,
        '',
      ].join('\n'),
    );
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
