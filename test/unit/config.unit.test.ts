import { generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../../src/config.js';

const secret = 's'.repeat(32);
const pemOf = (type: 'ed25519' | 'rsa') =>
  generateKeyPairSync(type as 'ed25519', type === 'rsa' ? ({ modulusLength: 1024 } as object) : {}).privateKey.export({
    type: 'pkcs8',
    format: 'pem',
  }) as string;
const signingKey = pemOf('ed25519');

/** The ConfigError message parseConfig throws for an environment. */
function configError(environment: NodeJS.ProcessEnv): string {
  let caught: unknown;
  try {
    parseConfig(environment);
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(ConfigError);
  return (caught as ConfigError).message;
}

describe('parseConfig', () => {
  it('lets an operator tool run on DATABASE_URL without a token secret, which serving requires', () => {
    const env = { DATABASE_URL: 'postgresql://app:pw@db:5432/app' };
    expect(() => parseConfig(env)).toThrow(/AUTH_JWT_SECRET: with DATABASE_URL set/);
    expect(parseConfig(env, 'tool')).toMatchObject({ purpose: 'tool', databaseUrl: env.DATABASE_URL, auth: { jwtSecret: undefined } });
  });

  it('gives the defaults for an empty environment (the embedded mode)', () => {
    expect(parseConfig({})).toEqual({
      purpose: 'serve',
      port: 8080,
      host: '127.0.0.1',
      databaseUrl: undefined,
      eventStoreUrl: undefined,
      dataDir: './.data',
      auth: { jwtSecret: undefined, jwksUrl: undefined, issuer: undefined, audience: undefined },
      projectionWaitMs: 5000,
      projectorMaxBatchEvents: 2_500,
      projectorCachedRows: 100_000,
      projectorBulkCatchUpEvents: 100_000,
      recordQueueLimit: 256,
      recordRateLimit: 1000,
      bodyLimitBytes: 1024 * 1024,
      requestTimeoutMs: 60_000,
      rateLimitPerMinute: 0,
      changeStreamsPerCaller: 10,
      changeStreamHeartbeatMs: 10_000,
      shutdownDrainMs: 10_000,
      webhooks: {
        timeoutMs: 15_000,
        retrySchedule: [5000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000],
        disableAfterMs: 432_000_000,
        allowPrivateTargets: false,
        deliveryNice: 0,
      },
      logLevel: 'info',
      metrics: { port: undefined, host: '127.0.0.1' },
      tracing: { tracesUrl: undefined, serviceName: 'workspace-solution-api' },
      audit: { signingKey: undefined, checkpointIntervalMs: 5000, benchWithoutIntegrity: false },
    });
  });

  it('refuses an audit signing key that is not a PEM private key, and a checkpoint interval over 10 s', () => {
    expect(() => parseConfig({ AUDIT_SIGNING_KEY: 'secret' })).toThrow(/AUDIT_SIGNING_KEY: must be a PKCS#8 PEM private key/);
    expect(() => parseConfig({ AUDIT_CHECKPOINT_INTERVAL_MS: '10001' })).toThrow(/AUDIT_CHECKPOINT_INTERVAL_MS/);
    for (const key of ['-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----', pemOf('rsa')]) {
      expect(() => parseConfig({ AUDIT_SIGNING_KEY: key })).toThrow(/AUDIT_SIGNING_KEY: must be an Ed25519 private key in PKCS#8 PEM/);
    }
  });

  it('refuses a metrics port that is the API port, and a secret with white space around it', () => {
    expect(configError({ PORT: '9000', METRICS_PORT: '9000' })).toContain('  METRICS_PORT: must differ from PORT on the same host');
    expect(configError({ PORT: '9000', METRICS_PORT: '9000', HOST: '0.0.0.0', METRICS_HOST: '127.0.0.1' })).toContain('  METRICS_PORT: ');
    expect(parseConfig({ PORT: '9000', METRICS_PORT: '9000', HOST: '10.0.0.5', METRICS_HOST: '127.0.0.1' }).metrics.port).toBe(9000);
    for (const padded of [' '.repeat(32), ` ${secret}`, `${secret}\n`]) {
      expect(configError({ AUTH_JWT_SECRET: padded })).toContain('  AUTH_JWT_SECRET: must not begin or end with white space');
    }
  });

  it('treats empty strings as unset', () => {
    const empty = {
      PORT: '',
      HOST: '',
      DATABASE_URL: '',
      EVENTSTORE_URL: '',
      DATA_DIR: '',
      AUTH_JWT_SECRET: '',
      AUTH_JWKS_URL: '',
      AUTH_ISSUER: '',
      AUTH_AUDIENCE: '',
      PROJECTION_WAIT_MS: '',
      BODY_LIMIT_BYTES: '',
      REQUEST_TIMEOUT_MS: '',
      RATE_LIMIT_PER_MINUTE: '',
      CHANGE_STREAMS_PER_CALLER: '',
      CHANGE_STREAM_HEARTBEAT_MS: '',
      WEBHOOK_TIMEOUT_MS: '',
      SHUTDOWN_DRAIN_MS: '',
      WEBHOOK_RETRY_SCHEDULE: '',
      WEBHOOK_DISABLE_AFTER: '',
      WEBHOOK_ALLOW_PRIVATE_TARGETS: '',
      LOG_LEVEL: '',
      METRICS_PORT: '',
      METRICS_HOST: '',
      OTEL_EXPORTER_OTLP_ENDPOINT: '',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '',
      OTEL_SERVICE_NAME: '',
      AUDIT_SIGNING_KEY: '',
      AUDIT_CHECKPOINT_INTERVAL_MS: '',
      BENCH_WITHOUT_INTEGRITY: '',
    };
    expect(parseConfig(empty)).toEqual(parseConfig({}));
  });

  it('reads every setting', () => {
    const config = parseConfig({
      PORT: '3000',
      HOST: '0.0.0.0',
      DATABASE_URL: 'postgresql://app:pw@db:5432/app',
      EVENTSTORE_URL: 'esdb+discover://es:2113?tls=false',
      DATA_DIR: '/var/lib/app',
      AUTH_JWT_SECRET: secret,
      AUTH_ISSUER: 'https://issuer.example',
      AUTH_AUDIENCE: 'workspace-api',
      PROJECTION_WAIT_MS: '250',
      PROJECTOR_MAX_BATCH_EVENTS: '1000',
      PROJECTOR_CACHED_ROWS: '5000',
      PROJECTOR_BULK_CATCH_UP_EVENTS: '0',
      RECORD_QUEUE_LIMIT: '16',
      RECORD_RATE_LIMIT: '0',
      BODY_LIMIT_BYTES: '2048',
      REQUEST_TIMEOUT_MS: '5000',
      RATE_LIMIT_PER_MINUTE: '120',
      CHANGE_STREAMS_PER_CALLER: '3',
      CHANGE_STREAM_HEARTBEAT_MS: '500',
      WEBHOOK_TIMEOUT_MS: '500',
      WEBHOOK_DELIVERY_NICE: '19',
      SHUTDOWN_DRAIN_MS: '2500',
      WEBHOOK_RETRY_SCHEDULE: '100ms,1s',
      WEBHOOK_DISABLE_AFTER: '2h',
      WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
      LOG_LEVEL: 'debug',
      METRICS_PORT: '9464',
      METRICS_HOST: '10.0.0.5',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/custom/traces',
      OTEL_SERVICE_NAME: 'wsapi-eu',
      // As in an env file: the line breaks written as \n.
      AUDIT_SIGNING_KEY: signingKey.replace(/\n/g, '\\n'),
      AUDIT_CHECKPOINT_INTERVAL_MS: '1000',
      BENCH_WITHOUT_INTEGRITY: 'true',
    });
    expect(config).toEqual({
      purpose: 'serve',
      port: 3000,
      host: '0.0.0.0',
      databaseUrl: 'postgresql://app:pw@db:5432/app',
      eventStoreUrl: 'esdb+discover://es:2113?tls=false',
      dataDir: '/var/lib/app',
      auth: { jwtSecret: secret, jwksUrl: undefined, issuer: 'https://issuer.example', audience: 'workspace-api' },
      projectionWaitMs: 250,
      projectorMaxBatchEvents: 1000,
      projectorCachedRows: 5000,
      projectorBulkCatchUpEvents: 0,
      recordQueueLimit: 16,
      recordRateLimit: 0,
      bodyLimitBytes: 2048,
      requestTimeoutMs: 5000,
      rateLimitPerMinute: 120,
      changeStreamsPerCaller: 3,
      changeStreamHeartbeatMs: 500,
      shutdownDrainMs: 2500,
      webhooks: { timeoutMs: 500, retrySchedule: [100, 1000], disableAfterMs: 7_200_000, allowPrivateTargets: true, deliveryNice: 19 },
      logLevel: 'debug',
      metrics: { port: 9464, host: '10.0.0.5' },
      tracing: { tracesUrl: 'http://collector:4318/custom/traces', serviceName: 'wsapi-eu' },
      audit: {
        signingKey,
        checkpointIntervalMs: 1000,
        benchWithoutIntegrity: true,
      },
    });
  });

  it('serves metrics on the API port unless METRICS_PORT is set, on HOST unless METRICS_HOST is', () => {
    expect(parseConfig({ HOST: '0.0.0.0' }).metrics).toEqual({ port: undefined, host: '0.0.0.0' });
    expect(parseConfig({ HOST: '0.0.0.0', METRICS_PORT: '9464' }).metrics).toEqual({ port: 9464, host: '0.0.0.0' });
  });

  it('traces only with an OTLP endpoint: the base endpoint gets /v1/traces, the traces endpoint is used as given', () => {
    expect(parseConfig({}).tracing.tracesUrl).toBeUndefined();
    expect(parseConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' }).tracing.tracesUrl).toBe(
      'http://collector:4318/v1/traces',
    );
    expect(
      parseConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example/in' })
        .tracing.tracesUrl,
    ).toBe('https://traces.example/in');
  });

  it('accepts postgres:// and esdb:// and an https JWKS URL', () => {
    const config = parseConfig({
      DATABASE_URL: 'postgres://h/db',
      EVENTSTORE_URL: 'esdb://es:2113',
      AUTH_JWKS_URL: 'https://idp/jwks.json',
    });
    expect(config.databaseUrl).toBe('postgres://h/db');
    expect(config.eventStoreUrl).toBe('esdb://es:2113');
    expect(config.auth.jwksUrl).toBe('https://idp/jwks.json');
  });

  it('accepts the port bounds 0 and 65535', () => {
    expect(parseConfig({ PORT: '0' }).port).toBe(0);
    expect(parseConfig({ PORT: '65535' }).port).toBe(65535);
  });

  it.each(['abc', '-1', '1.5', '65536', '80 ', '0x50', '1e3'])('rejects PORT=%j, naming PORT', (port) => {
    expect(configError({ PORT: port })).toMatch(/^ {2}PORT: /m);
  });

  it('says why a PORT is rejected', () => {
    expect(configError({ PORT: 'abc' })).toContain('PORT: must be a whole number');
    expect(configError({ PORT: '70000' })).toMatch(/PORT: .*65535/);
  });

  it.each([
    ['PROJECTION_WAIT_MS', '-1', 'must be a whole number from 0 to 600000'],
    ['PROJECTION_WAIT_MS', '600001', 'must be a whole number from 0 to 600000'],
    ['METRICS_PORT', '0', 'must be a whole number from 1 to 65535'],
    ['METRICS_PORT', 'x', 'must be a whole number from 1 to 65535'],
  ])('given %s=%s, names the range the number must be in', (name, value, message) => {
    expect(configError({ [name]: value })).toContain(`${name}: ${message}`);
  });

  it.each([
    ['DATABASE_URL', 'http://db:5432/app', 'must be a postgres:// or postgresql:// URL'],
    ['DATABASE_URL', 'not a url', 'must be a postgres:// or postgresql:// URL'],
    ['EVENTSTORE_URL', 'postgres://es:2113', 'must be an esdb:// or esdb+discover:// URL'],
    ['EVENTSTORE_URL', 'es:2113', 'must be an esdb:// or esdb+discover:// URL'],
    ['AUTH_JWKS_URL', 'ftp://idp/jwks.json', 'must be an https:// URL (http:// only for localhost)'],
    ['AUTH_JWKS_URL', '/jwks.json', 'must be an https:// URL (http:// only for localhost)'],
    ['AUTH_JWKS_URL', 'http://idp.example/jwks.json', 'must be an https:// URL (http:// only for localhost)'],
  ])('rejects %s=%j', (key, value, message) => {
    expect(configError({ [key]: value })).toContain(`${key}: ${message}`);
  });

  it('rejects a secret shorter than 32 characters and accepts 32', () => {
    expect(configError({ AUTH_JWT_SECRET: 's'.repeat(31) })).toContain('AUTH_JWT_SECRET: must be at least 32 characters');
    expect(parseConfig({ AUTH_JWT_SECRET: secret }).auth.jwtSecret).toBe(secret);
  });

  it('rejects both a secret and a JWKS URL', () => {
    expect(configError({ AUTH_JWT_SECRET: secret, AUTH_JWKS_URL: 'https://idp/jwks.json' })).toContain(
      'AUTH_JWKS_URL: set AUTH_JWT_SECRET or AUTH_JWKS_URL, not both',
    );
  });

  it('rejects DATABASE_URL without a secret or JWKS URL, and accepts it with either', () => {
    expect(configError({ DATABASE_URL: 'postgres://h/db' })).toContain(
      'AUTH_JWT_SECRET: with DATABASE_URL set, AUTH_JWT_SECRET or AUTH_JWKS_URL is required',
    );
    expect(parseConfig({ DATABASE_URL: 'postgres://h/db', AUTH_JWT_SECRET: secret }).databaseUrl).toBe('postgres://h/db');
    expect(parseConfig({ DATABASE_URL: 'postgres://h/db', AUTH_JWKS_URL: 'https://idp/jwks' }).auth.jwksUrl).toBe('https://idp/jwks');
    expect(parseConfig({ DATABASE_URL: 'postgres://h/db', AUTH_JWKS_URL: 'http://127.0.0.1:9/jwks' }).auth.jwksUrl).toBe(
      'http://127.0.0.1:9/jwks',
    );
  });

  it.each([
    ['PROJECTION_WAIT_MS', '600001'],
    ['PROJECTOR_MAX_BATCH_EVENTS', '499'],
    ['PROJECTOR_CACHED_ROWS', '999'],
    ['PROJECTOR_BULK_CATCH_UP_EVENTS', '-1'],
    ['RECORD_QUEUE_LIMIT', '0'],
    ['RECORD_RATE_LIMIT', '-1'],
    ['PROJECTION_WAIT_MS', '-5'],
    ['BODY_LIMIT_BYTES', '1023'],
    ['BODY_LIMIT_BYTES', String(64 * 1024 * 1024 + 1)],
    ['REQUEST_TIMEOUT_MS', '999'],
    ['REQUEST_TIMEOUT_MS', '3600001'],
    ['RATE_LIMIT_PER_MINUTE', 'lots'],
    ['CHANGE_STREAMS_PER_CALLER', '0'],
    ['CHANGE_STREAM_HEARTBEAT_MS', '15001'],
    ['SHUTDOWN_DRAIN_MS', '600001'],
    ['WEBHOOK_RETRY_SCHEDULE', '5s,,2h'],
    ['WEBHOOK_DISABLE_AFTER', 'five days'],
    ['WEBHOOK_DISABLE_AFTER', '999999999d'],
    ['WEBHOOK_DISABLE_AFTER', '366d'],
    ['WEBHOOK_RETRY_SCHEDULE', '5s,999999999d'],
    ['WEBHOOK_ALLOW_PRIVATE_TARGETS', 'yes'],
    ['LOG_LEVEL', 'verbose'],
    ['METRICS_PORT', '0'],
    ['METRICS_PORT', '65536'],
    ['OTEL_EXPORTER_OTLP_ENDPOINT', 'grpc://collector:4317'],
    ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'collector:4318'],
  ])('rejects %s=%j', (key, value) => {
    expect(configError({ [key]: value })).toContain(`  ${key}: `);
  });

  it('lists every problem at once, one per line, under a heading', () => {
    const message = configError({ PORT: 'x', AUTH_JWT_SECRET: 'short', LOG_LEVEL: 'loud' });
    const lines = message.split('\n');
    expect(lines[0]).toBe('invalid configuration:');
    expect(
      lines
        .slice(1)
        .map((line) => line.trim().split(':')[0])
        .sort(),
    ).toEqual(['AUTH_JWT_SECRET', 'LOG_LEVEL', 'PORT']);
  });

  it('never echoes the secret in its message', () => {
    const almost = 'hunter2-'.repeat(3);
    expect(configError({ AUTH_JWT_SECRET: almost })).not.toContain(almost);
  });

  it('returns a frozen configuration, auth included', () => {
    const config = parseConfig({ AUTH_JWT_SECRET: secret });
    expect(Object.isFrozen(config)).toBe(true);
    expect(Object.isFrozen(config.auth)).toBe(true);
    expect(() => {
      (config as { port: number }).port = 1;
    }).toThrow(TypeError);
    expect(config.port).toBe(8080);
  });

  it('ignores unrelated variables', () => {
    expect(parseConfig({ PATH: '/usr/bin', HOME: '/root', NODE_ENV: 'test' })).toEqual(parseConfig({}));
  });
});
