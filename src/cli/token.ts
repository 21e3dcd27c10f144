import { parseArgs } from 'node:util';
import { allScopes, mintToken } from '../api/tokens.js';
import { parseConfig } from '../config.js';
import { readOrCreateDevelopmentSecret } from '../infra/embedded-postgres.js';
import { organizationId } from '../write/values.js';

/** npm run token -- --org org_x [--org org_y] [--scope "..."] [--sub name] [--expires 1h] */
const { values } = parseArgs({
  options: {
    org: { type: 'string', multiple: true, default: [] },
    scope: { type: 'string', default: allScopes },
    sub: { type: 'string', default: 'dev-user' },
    expires: { type: 'string', default: '1h' },
  },
});

const config = parseConfig();
if (config.auth.jwksUrl) {
  process.stderr.write('the service verifies tokens with AUTH_JWKS_URL; mint tokens with that key issuer instead\n');
  process.exit(2);
}
const badOrg = values.org.find((org) => !organizationId.safeParse(org).success);
if (badOrg) {
  process.stderr.write(`not an organization id: ${badOrg}\n`);
  process.exit(2);
}
const secret = config.auth.jwtSecret ?? (await readOrCreateDevelopmentSecret(config.dataDir));
const token = await mintToken(secret, {
  subject: values.sub,
  organizations: values.org,
  scope: values.scope,
  expiresIn: values.expires,
  issuer: config.auth.issuer,
  audience: config.auth.audience,
});
process.stdout.write(`${token}\n`);
