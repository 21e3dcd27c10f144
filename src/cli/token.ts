import { decodeJwt } from 'jose';
import { scopes } from '../api/auth.js';
import { mintToken } from '../api/tokens.js';
import { ConfigError, parseConfig } from '../config.js';
import { readOrCreateDevelopmentSecret } from '../infra/embedded-postgres.js';
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
if (
  !/^\d+\s*(s|sec|secs|second|seconds|m|min|mins|minute|minutes|h|hr|hrs|hour|hours|d|day|days|w|week|weeks|y|yr|yrs|year|years)$/i.test(
    values.expires,
  )
) {
  usageError(tool, `--expires ${values.expires} is not a lifetime such as 30m, 2h or 7d`);
}

let config;
try {
  config = parseConfig({ ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn' });
} catch (error) {
  if (error instanceof ConfigError) usageError(tool, error.message);
  throw error;
}
if (config.auth.jwksUrl) usageError(tool, 'the service verifies tokens with AUTH_JWKS_URL; mint tokens with that key issuer instead');
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
