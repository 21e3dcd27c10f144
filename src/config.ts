import { createPrivateKey } from 'node:crypto';
import { z } from 'zod';

/** Webhook retries (contract §15): the contract's schedule: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h. */
const defaultRetrySchedule = '5s,5m,30m,2h,5h,10h,10h';

/** Where the embedded default keeps its database, JWT secret and audit key. */
export const defaultDataDir = './.data';

const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A duration such as `250ms`, `5s`, `30m`, `2h`, `5d` in milliseconds; undefined when malformed. */
function parseDuration(text: string): number | undefined {
  const match = /^(\d{1,9})(ms|s|m|h|d)$/.exec(text.trim());
  return match ? Number(match[1]) * units[match[2]!]! : undefined;
}

/** A comma-separated schedule of durations; undefined when any is malformed or there are none. */
export function parseSchedule(text: string): number[] | undefined {
  const delays = text.split(',').map(parseDuration);
  return delays.length > 0 && delays.every((delay) => delay !== undefined) ? (delays as number[]) : undefined;
}

/** The longest webhook delay or give-up time: a year, far inside the timestamps PostgreSQL stores (a longer one is a slip). */
const longestWebhookDuration = 365 * units.d!;

function isEd25519PrivateKey(pem: string): boolean {
  try {
    return createPrivateKey(pem).asymmetricKeyType === 'ed25519';
  } catch {
    // Not a key at all: the refine's message says what is wanted.
    return false;
  }
}

const emptyAsUndefined = (value: unknown) => (value === '' ? undefined : value);
const optionalString = z.preprocess(emptyAsUndefined, z.string().optional());
const optionalUrl = (protocols: RegExp, hint: string) =>
  z.preprocess(
    emptyAsUndefined,
    z
      .string()
      .refine((value) => URL.canParse(value) && protocols.test(new URL(value).protocol), { message: hint })
      .optional(),
  );
/** A whole number of the environment within its range, which its message names whichever way it is missed. */
const wholeNumber = (min: number, max: number) => {
  const range = `must be a whole number from ${min} to ${max}`;
  return z.string().regex(/^\d+$/, range).transform(Number).pipe(z.number().int().min(min, range).max(max, range));
};
const integer = (fallback: number, min: number, max: number) => z.preprocess(emptyAsUndefined, wholeNumber(min, max).default(fallback));

const environmentSchema = z
  .object({
    PORT: integer(8080, 0, 65535),
    HOST: z.preprocess(emptyAsUndefined, z.string().default('127.0.0.1')),
    DATABASE_URL: optionalUrl(/^postgres(ql)?:$/, 'must be a postgres:// or postgresql:// URL'),
    EVENTSTORE_URL: optionalUrl(/^esdb(\+discover)?:$/, 'must be an esdb:// or esdb+discover:// URL'),
    DATA_DIR: z.preprocess(emptyAsUndefined, z.string().default(defaultDataDir)),
    AUTH_JWT_SECRET: z.preprocess(
      emptyAsUndefined,
      z
        .string()
        .min(32, 'must be at least 32 characters (HS256 needs a 256-bit key)')
        .refine(
          (value) => value.trim() === value,
          'must not begin or end with white space (a copy slip: tokens minted elsewhere would not match)',
        )
        .optional(),
    ),
    // Keys fetched in plain HTTP could be swapped on the way; plain HTTP only to this machine.
    AUTH_JWKS_URL: z.preprocess(
      emptyAsUndefined,
      z
        .string()
        .refine((value) => {
          if (!URL.canParse(value)) return false;
          const url = new URL(value);
          return url.protocol === 'https:' || (url.protocol === 'http:' && ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname));
        }, 'must be an https:// URL (http:// only for localhost)')
        .optional(),
    ),
    AUTH_ISSUER: optionalString,
    AUTH_AUDIENCE: optionalString,
    PROJECTION_WAIT_MS: integer(5000, 0, 600_000),
    PROJECTOR_MAX_BATCH_EVENTS: integer(2_500, 500, 1_000_000),
    PROJECTOR_CACHED_ROWS: integer(100_000, 1_000, 10_000_000),
    PROJECTOR_BULK_CATCH_UP_EVENTS: integer(100_000, 0, 1_000_000_000),
    RECORD_QUEUE_LIMIT: integer(256, 1, 100_000),
    RECORD_RATE_LIMIT: integer(1_000, 0, 1_000_000),
    BODY_LIMIT_BYTES: integer(1024 * 1024, 1024, 64 * 1024 * 1024),
    REQUEST_TIMEOUT_MS: integer(60_000, 1000, 3_600_000),
    RATE_LIMIT_PER_MINUTE: integer(0, 0, 1_000_000),
    CHANGE_STREAMS_PER_CALLER: integer(10, 1, 10_000),
    // At most the contract's 15 s: the stream waits a little less than the setting, so that its read and write fit within it.
    CHANGE_STREAM_HEARTBEAT_MS: integer(10_000, 100, 15_000),
    WEBHOOK_TIMEOUT_MS: integer(15_000, 100, 600_000),
    WEBHOOK_DELIVERY_NICE: integer(0, 0, 19),
    SHUTDOWN_DRAIN_MS: integer(10_000, 0, 600_000),
    WEBHOOK_RETRY_SCHEDULE: z.preprocess(
      emptyAsUndefined,
      z
        .string()
        .default(defaultRetrySchedule)
        .refine((text) => parseSchedule(text) !== undefined, 'must be durations separated by commas, such as 5s,5m,2h (units ms s m h d)')
        .refine((text) => (parseSchedule(text) ?? []).every((delay) => delay <= longestWebhookDuration), 'each delay must be at most 365d'),
    ),
    WEBHOOK_DISABLE_AFTER: z.preprocess(
      emptyAsUndefined,
      z
        .string()
        .default('5d')
        .refine((text) => parseDuration(text) !== undefined, 'must be a duration such as 5d, 12h or 30s')
        .refine((text) => (parseDuration(text) ?? 0) <= longestWebhookDuration, 'must be at most 365d'),
    ),
    WEBHOOK_ALLOW_PRIVATE_TARGETS: z.preprocess(emptyAsUndefined, z.enum(['true', 'false']).default('false')),
    LOG_LEVEL: z.preprocess(emptyAsUndefined, z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info')),
    METRICS_PORT: z.preprocess(emptyAsUndefined, wholeNumber(1, 65535).optional()),
    METRICS_HOST: optionalString,
    OTEL_EXPORTER_OTLP_ENDPOINT: optionalUrl(/^https?:$/, 'must be an http:// or https:// URL'),
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: optionalUrl(/^https?:$/, 'must be an http:// or https:// URL'),
    OTEL_SERVICE_NAME: z.preprocess(emptyAsUndefined, z.string().default('workspace-solution-api')),
    // A PEM in one line of an env file has its line breaks written as \n.
    AUDIT_SIGNING_KEY: z.preprocess(
      emptyAsUndefined,
      z
        .string()
        .transform((value) => value.replace(/\\n/g, '\n'))
        .refine(
          (value) => /-----BEGIN PRIVATE KEY-----[\s\S]+-----END PRIVATE KEY-----/.test(value),
          'must be a PKCS#8 PEM private key (Ed25519)',
        )
        .refine(
          isEd25519PrivateKey,
          'must be an Ed25519 private key in PKCS#8 PEM (openssl genpkey -algorithm ed25519); this one does not read as one',
        )
        .optional(),
    ),
    AUDIT_CHECKPOINT_INTERVAL_MS: integer(5000, 100, 10_000),
    BENCH_WITHOUT_INTEGRITY: z.preprocess(emptyAsUndefined, z.enum(['true', 'false']).default('false')),
  })
  .superRefine((env, ctx) => {
    if (env.AUTH_JWT_SECRET && env.AUTH_JWKS_URL) {
      ctx.addIssue({ code: 'custom', path: ['AUTH_JWKS_URL'], message: 'set AUTH_JWT_SECRET or AUTH_JWKS_URL, not both' });
    }
    const metricsHost = env.METRICS_HOST ?? env.HOST;
    const sameAddress = metricsHost === env.HOST || [metricsHost, env.HOST].some((host) => ['0.0.0.0', '::', '[::]'].includes(host));
    if (env.METRICS_PORT !== undefined && env.METRICS_PORT === env.PORT && sameAddress) {
      ctx.addIssue({
        code: 'custom',
        path: ['METRICS_PORT'],
        message: 'must differ from PORT on the same host (the metrics get a listener of their own)',
      });
    }
  });

/**
 * What the configuration is for: the service checks tokens, so it needs a way to; an operator tool
 * (rebuild, verify, history) reads the same stores and checks none.
 */
export type Purpose = 'serve' | 'tool';

export type Config = Readonly<{
  purpose: Purpose;
  port: number;
  host: string;
  databaseUrl: string | undefined;
  eventStoreUrl: string | undefined;
  dataDir: string;
  auth: Readonly<{
    jwtSecret: string | undefined;
    jwksUrl: string | undefined;
    issuer: string | undefined;
    audience: string | undefined;
  }>;
  projectionWaitMs: number;
  /** Commands that may wait their turn on one record at one instance before more are refused with 429 (contract §7). */
  recordQueueLimit: number;
  /** Commands per second one record may take at one instance; beyond, they wait their turn longer (0: no limit). */
  recordRateLimit: number;
  /** The most events the projector applies in one batch while it catches up (src/projections/catch-up.ts). */
  projectorMaxBatchEvents: number;
  /** Rows the projector keeps in memory from batch to batch while it catches up. */
  projectorCachedRows: number;
  /** A backlog this long, and at least half the log, is projected in bulk as a rebuild does (PostgreSQL store); 0: never. */
  projectorBulkCatchUpEvents: number;
  bodyLimitBytes: number;
  /** A client still sending its request (headers and body) after this long is answered 400 and disconnected. */
  requestTimeoutMs: number;
  rateLimitPerMinute: number;
  /** Open change streams (contract §14) per caller (`sub`) and instance; one more is refused with 429. */
  changeStreamsPerCaller: number;
  /** An idle change stream gets a comment after this long without a change. */
  changeStreamHeartbeatMs: number;
  /** On a stop, requests in flight get this long to finish; then their connections are closed. */
  shutdownDrainMs: number;
  webhooks: Readonly<{
    /** An attempt fails without a 2xx within this long. */
    timeoutMs: number;
    /** Delays before each retry (±20 % jitter); once spent, the delivery is failed. */
    retrySchedule: readonly number[];
    /** A webhook failing for this long without a success is disabled. */
    disableAfterMs: number;
    /** http:// and non-public addresses allowed (development and tests only). */
    allowPrivateTargets: boolean;
    /** The delivery thread's nice value (Linux): 0 as the API, up to 19 for least CPU while the machine is busy. */
    deliveryNice: number;
  }>;
  logLevel: string;
  /** Where GET /metrics is served: on the API's port (`port` undefined) or on a listener of its own. */
  metrics: Readonly<{ port: number | undefined; host: string }>;
  /** Traces are exported by OTLP/HTTP to `tracesUrl`; undefined: no tracing at all. */
  tracing: Readonly<{ tracesUrl: string | undefined; serviceName: string }>;
  /** Signed checkpoints (contract §16): the Ed25519 key's PEM (undefined: the one generated in `dataDir`), and how often a growing tree is signed. */
  audit: Readonly<{
    signingKey: string | undefined;
    checkpointIntervalMs: number;
    /**
     * Bench only: no hashes appended and no tree kept, the baseline `npm run bench:audit` measures
     * the service against. Never for a service whose history must be provable.
     */
    benchWithoutIntegrity: boolean;
  }>;
}>;

/** Every environment variable the service reads (documented with its default in `.env.example`). */
export const configurationVariables: readonly string[] = Object.keys(environmentSchema.shape);

/** The OpenTelemetry rule: a base endpoint gets the signal's path appended; a traces endpoint is used as it is. */
const tracesUrlOf = (endpoint: string | undefined) => endpoint && `${endpoint.replace(/\/+$/, '')}/v1/traces`;

export class ConfigError extends Error {}

export function parseConfig(environment: NodeJS.ProcessEnv = process.env, purpose: Purpose = 'serve'): Config {
  const parsed = environmentSchema.safeParse(environment);
  const issues = parsed.success ? [] : parsed.error.issues.map((issue) => ({ path: issue.path.join('.'), message: issue.message }));
  if (purpose === 'serve' && parsed.success && parsed.data.DATABASE_URL && !parsed.data.AUTH_JWT_SECRET && !parsed.data.AUTH_JWKS_URL) {
    issues.push({
      path: 'AUTH_JWT_SECRET',
      message:
        'with DATABASE_URL set, AUTH_JWT_SECRET or AUTH_JWKS_URL is required (only the embedded mode generates a development secret)',
    });
  }
  if (!parsed.success || issues.length > 0) {
    throw new ConfigError(`invalid configuration:\n${issues.map((issue) => `  ${issue.path}: ${issue.message}`).join('\n')}`);
  }
  const env = parsed.data;
  return Object.freeze({
    purpose,
    port: env.PORT,
    host: env.HOST,
    databaseUrl: env.DATABASE_URL,
    eventStoreUrl: env.EVENTSTORE_URL,
    dataDir: env.DATA_DIR,
    auth: Object.freeze({
      jwtSecret: env.AUTH_JWT_SECRET,
      jwksUrl: env.AUTH_JWKS_URL,
      issuer: env.AUTH_ISSUER,
      audience: env.AUTH_AUDIENCE,
    }),
    projectionWaitMs: env.PROJECTION_WAIT_MS,
    recordQueueLimit: env.RECORD_QUEUE_LIMIT,
    recordRateLimit: env.RECORD_RATE_LIMIT,
    projectorMaxBatchEvents: env.PROJECTOR_MAX_BATCH_EVENTS,
    projectorCachedRows: env.PROJECTOR_CACHED_ROWS,
    projectorBulkCatchUpEvents: env.PROJECTOR_BULK_CATCH_UP_EVENTS,
    bodyLimitBytes: env.BODY_LIMIT_BYTES,
    requestTimeoutMs: env.REQUEST_TIMEOUT_MS,
    rateLimitPerMinute: env.RATE_LIMIT_PER_MINUTE,
    changeStreamsPerCaller: env.CHANGE_STREAMS_PER_CALLER,
    changeStreamHeartbeatMs: env.CHANGE_STREAM_HEARTBEAT_MS,
    shutdownDrainMs: env.SHUTDOWN_DRAIN_MS,
    webhooks: Object.freeze({
      timeoutMs: env.WEBHOOK_TIMEOUT_MS,
      retrySchedule: Object.freeze(parseSchedule(env.WEBHOOK_RETRY_SCHEDULE)!),
      disableAfterMs: parseDuration(env.WEBHOOK_DISABLE_AFTER)!,
      allowPrivateTargets: env.WEBHOOK_ALLOW_PRIVATE_TARGETS === 'true',
      deliveryNice: env.WEBHOOK_DELIVERY_NICE,
    }),
    logLevel: env.LOG_LEVEL,
    metrics: Object.freeze({ port: env.METRICS_PORT, host: env.METRICS_HOST ?? env.HOST }),
    tracing: Object.freeze({
      tracesUrl: env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? tracesUrlOf(env.OTEL_EXPORTER_OTLP_ENDPOINT),
      serviceName: env.OTEL_SERVICE_NAME,
    }),
    audit: Object.freeze({
      signingKey: env.AUDIT_SIGNING_KEY,
      checkpointIntervalMs: env.AUDIT_CHECKPOINT_INTERVAL_MS,
      benchWithoutIntegrity: env.BENCH_WITHOUT_INTEGRITY === 'true',
    }),
  });
}
