import { SignJWT } from 'jose';
import { scopes } from './auth.js';

export type TokenClaims = {
  subject: string;
  organizations: string[];
  scope?: string;
  expiresIn?: string;
  issuer?: string | undefined;
  audience?: string | undefined;
};

export const allScopes = scopes.join(' ');

/** An HS256 token the service accepts when it runs with `secret`. */
export async function mintToken(secret: string, claims: TokenClaims): Promise<string> {
  let jwt = new SignJWT({ orgs: claims.organizations, scope: claims.scope ?? allScopes })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(claims.subject)
    .setIssuedAt()
    .setExpirationTime(claims.expiresIn ?? '1h');
  if (claims.issuer) jwt = jwt.setIssuer(claims.issuer);
  if (claims.audience) jwt = jwt.setAudience(claims.audience);
  return jwt.sign(new TextEncoder().encode(secret));
}
