import { decodeJwt } from 'jose';
import { existsSync } from 'node:fs';
import { scopes, subjectClaim } from '../api/auth.js';
import { mintToken } from '../api/tokens.js';
import { ConfigError, parseConfig } from '../config.js';
import { developmentSecretFile, readOrCreateDevelopmentSecret } from '../infra/embedded-postgres.js';
import { organizationId } from '../domain/values.js';
import { commandLine, usageError } from './arguments.js';

const tool = 'npm run token';
const defaultLifetime = '1h';
const usage = `usage: npm run -s token -- --org <organization> [--org <organization>...] [options]

Mints a token the service accepts, signed with its secret (AUTH_JWT_SECRET, or the development
secret in DATA_DIR). The token alone goes to stdout, so TOKEN=$(npm run -s token -- --org org_dev)
works; what was minted is described on stderr.

  --org <id>        an organization the token grants (at least one; repeat for more)
  --scope "<list>"  space-separated scopes (default: all of them: ${scopes.join(' ')})
  --sub <name>      the subject, i.e. the caller (default: dev-user)
  --expires <time>  lifetime, such as 30m, 2h, 7d (default: ${defaultLifetime})
  -h, --help        this text
`;

/** The longest lifetime --expires takes: a longer one is a slip, and past the dates a JWT can hold. */
const maxLifetimeSeconds = 10 * 365.25 * 86_400;

/** The seconds a lifetime such as 30m, 2h or 7d stands for (as jose reads it), or undefined when it is none. */
function lifetimeSeconds(text: string): number | undefined {
  const match = /^(\d+)\s*([a-z]+)$/i.exec(text);
  const unit = match && unitSeconds.find(([names]) => names.includes(match[2]!.toLowerCase()));
  return match && unit ? Number(match[1]) * unit[1] : undefined;
}
const unitSeconds: [string[], number][] = [
  [['s', 'sec', 'secs', 'second', 'seconds'], 1],
  [['m', 'min', 'mins', 'minute', 'minutes'], 60],
  [['h', 'hr', 'hrs', 'hour', 'hours'], 3_600],
  [['d', 'day', 'days'], 86_400],
  [['w', 'week', 'weeks'], 604_800],
  [['y', 'yr', 'yrs', 'year', 'years'], 31_557_600],
];

const { values } = commandLine(tool, usage, {
  org: { type: 'string', multiple: true, default: [] },
  scope: { type: 'string', default: scopes.join(' ') },
  sub: { type: 'string', default: 'dev-user' },
  expires: { type: 'string', default: defaultLifetime },
});

if (values.org.length === 0) usageError(tool, 'give at least one --org: a token without organizations sees nothing');
const badOrganization = values.org.find((org) => !organizationId.safeParse(org).success);
if (badOrganization) usageError(tool, `not an organization id: ${badOrganization}`);
const requested = values.scope.split(/\s+/).filter(Boolean);
const unknownScope = requested.find((scope) => !(scopes as readonly string[]).includes(scope));
if (unknownScope !== undefined) usageError(tool, `unknown scope ${unknownScope}; the scopes are ${scopes.join(', ')}`);
if (requested.length === 0) usageError(tool, '--scope names no scope');
const lifetime = lifetimeSeconds(values.expires);
if (lifetime === undefined) usageError(tool, `--expires ${values.expires} is not a lifetime such as 30m, 2h or 7d`);
if (lifetime === 0) usageError(tool, `--expires ${values.expires} makes a token that has already expired`);
if (lifetime > maxLifetimeSeconds) usageError(tool, `--expires ${values.expires} is longer than 10 years`);
if (!subjectClaim.safeParse(values.sub).success) {
  usageError(tool, '--sub must be 1 to 255 characters, well-formed, without control characters: the service refuses any other');
}

let config;
try {
  config = parseConfig({ ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn' });
} catch (error) {
  if (error instanceof ConfigError) usageError(tool, error.message);
  throw error;
}
if (config.auth.jwksUrl) usageError(tool, 'the service verifies tokens with AUTH_JWKS_URL; mint tokens with that key issuer instead');
if (!config.auth.jwtSecret && !existsSync(developmentSecretFile(config.dataDir))) {
  process.stderr.write(
    `no development secret in ${config.dataDir} (DATA_DIR): made a new one there; a service started with another DATA_DIR or ` +
      'AUTH_JWT_SECRET refuses this token\n',
  );
}
const secret = config.auth.jwtSecret ?? (await readOrCreateDevelopmentSecret(config.dataDir));
const token = await mintToken(secret, {
  subject: values.sub,
  organizations: values.org,
  scope: requested.join(' '),
  expiresIn: values.expires,
  issuer: config.auth.issuer,
  audience: config.auth.audience,
});
const expiresAt = new Date((decodeJwt(token).exp ?? 0) * 1000).toISOString();
process.stderr.write(
  `minted a token for subject ${values.sub}, organizations ${values.org.join(', ')}, scopes ${requested.join(' ')}, ` +
    `valid until ${expiresAt} (${values.expires})\n`,
);
process.stdout.write(`${token}\n`);
