import { webcrypto } from 'node:crypto';
import { createRemoteJWKSet, errors as joseErrors, jwtVerify, type JWTPayload, type JWTVerifyGetKey } from 'jose';
import { z } from 'zod';
import { ServiceError, unavailable } from '../errors.js';
import { organizationId } from '../domain/values.js';

export const scopes = ['workspaces:read', 'workspaces:write', 'solutions:read', 'solutions:write', 'webhooks:manage'] as const;
export type Scope = (typeof scopes)[number];

export type Principal = {
  subject: string;
  organizations: ReadonlySet<string>;
  scopes: ReadonlySet<string>;
  /**
   * Until when the service accepts the token (ms since the epoch): its `exp` plus the clock
   * tolerance (contract §3). A change stream is served until then, like any other request.
   */
  acceptedUntil: number;
};

export type AuthSettings =
  | { kind: 'secret'; secret: string; issuer?: string | undefined; audience?: string | undefined }
  | { kind: 'jwks'; jwksUrl: string; issuer?: string | undefined; audience?: string | undefined };

/** The subject is recorded as the actor of events: it must be storable text. */
export const subjectClaim = z
  .string()
  .min(1)
  .max(255)
  .refine((value) => value.isWellFormed() && !/\p{Cc}/u.test(value));

const claimsSchema = z.object({
  sub: subjectClaim,
  orgs: z.array(organizationId),
  scope: z.string().optional(),
});

export type TokenVerifier = (authorization: string | undefined) => Promise<Principal>;

const unauthenticated = (message: string) => new ServiceError('unauthenticated', message);

/**
 * A request's one Authorization value, from its header lines as received. Node keeps the first of
 * repeated lines and drops the rest, while a proxy in front may have checked another: a repeat is
 * refused (RFC 9110 §5.3: a field that is not a list is sent once).
 */
export function soleAuthorization(rawHeaders: readonly string[]): string | undefined {
  let value: string | undefined;
  for (let at = 0; at < rawHeaders.length; at += 2) {
    if (rawHeaders[at]!.toLowerCase() !== 'authorization') continue;
    if (value !== undefined) throw unauthenticated('send one Authorization header, not several');
    value = rawHeaders[at + 1];
  }
  return value;
}

/**
 * The HS256 secret as a key imported once: given the raw bytes, jose imports them again for every
 * token (about 50 µs of CPU per request, measured with --cpu-prof).
 */
function hmacKey(secret: string): Promise<webcrypto.CryptoKey> {
  return webcrypto.subtle.importKey('raw', new TextEncoder().encode(secret), { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
}

/**
 * How long a verified token is taken as verified without checking its signature again. A client
 * sends the same token with every request: verifying it each time was about a tenth of the
 * service's CPU under a storm of writes (--cpu-prof, issue 21), and a hop through libuv's thread
 * pool that every request's answer waited behind. Short, so that a key taken out of a JWKS stops
 * being honoured soon after; never past the token's own expiry.
 */
const verifiedTokenTtlMs = 10_000;
/** Tokens remembered at most: beyond, the oldest is forgotten (and verified again when it comes back). */
const verifiedTokensKept = 10_000;
/** The leeway on `exp`, `nbf` and `iat`, seconds. */
const clockToleranceSeconds = 30;

/** Verifies bearer tokens (contract §3): algorithms pinned to the configured family, `exp` required, `iat` not in the future, 30 s leeway. */
export function createTokenVerifier(settings: AuthSettings): TokenVerifier {
  const verified = new Map<string, { principal: Principal; until: number }>();
  const algorithms = settings.kind === 'secret' ? ['HS256'] : ['RS256', 'ES256', 'EdDSA'];
  const options = {
    algorithms,
    requiredClaims: ['exp'],
    clockTolerance: clockToleranceSeconds,
    ...(settings.issuer ? { issuer: settings.issuer } : {}),
    ...(settings.audience ? { audience: settings.audience } : {}),
  };
  const verify =
    settings.kind === 'secret'
      ? (
          (key: Promise<webcrypto.CryptoKey>) => async (token: string) =>
            jwtVerify(token, await key, options)
        )(hmacKey(settings.secret))
      : (
          (keys: JWTVerifyGetKey) => (token: string) =>
            jwtVerify(token, keys, options)
        )(remoteKeys(settings.jwksUrl));

  return async (authorization) => {
    const match = /^Bearer +([A-Za-z0-9._~+/=-]+) *$/i.exec(authorization ?? '');
    if (!match) throw unauthenticated('a bearer token is required');
    const token = match[1]!;
    const now = Date.now();
    const known = verified.get(token);
    if (known && now < known.until) return known.principal;
    let payload: JWTPayload;
    try {
      ({ payload } = await verify(token));
    } catch (error) {
      if (error instanceof KeySetUnavailable) throw unavailable('the token keys cannot be fetched');
      if (error instanceof joseErrors.JOSEError) throw unauthenticated(tokenProblem(error));
      // What else jose throws comes from the token's bytes (a TypeError decoding malformed base64url):
      // the key cannot fail, the configuration having checked the secret or the key set answering above.
      throw unauthenticated('the token is not valid');
    }
    // jose checks a present `iat` is a number but not that it is in the past; a token issued
    // beyond the leeway ahead of this clock is refused as `nbf` would be.
    if (payload.iat !== undefined && payload.iat > now / 1000 + clockToleranceSeconds) {
      throw unauthenticated("the token's iat claim is not valid");
    }
    const claims = claimsSchema.safeParse(payload);
    if (!claims.success) throw unauthenticated('the token lacks valid sub, orgs or scope claims');
    const principal: Principal = {
      subject: claims.data.sub,
      organizations: new Set(claims.data.orgs),
      scopes: new Set((claims.data.scope ?? '').split(' ').filter(Boolean)),
      // jose checked `exp` is present and a number, and that it is no further than the tolerance in the past.
      acceptedUntil: (payload.exp! + clockToleranceSeconds) * 1000,
    };
    verified.delete(token);
    if (verified.size >= verifiedTokensKept) verified.delete(verified.keys().next().value!);
    verified.set(token, { principal, until: Math.min(now + verifiedTokenTtlMs, principal.acceptedUntil) });
    return principal;
  };
}

class KeySetUnavailable extends Error {}

/**
 * The JWKS, fetched and cached by jose. A key set that cannot be fetched or read is the service's
 * problem (503), not the caller's; a token whose key is not in the set is the caller's (401).
 */
function remoteKeys(jwksUrl: string): JWTVerifyGetKey {
  const keySet = createRemoteJWKSet(new URL(jwksUrl));
  return async (header, token) => {
    try {
      return await keySet(header, token);
    } catch (error) {
      if (error instanceof joseErrors.JWKSNoMatchingKey || error instanceof joseErrors.JWKSMultipleMatchingKeys) throw error;
      throw new KeySetUnavailable('the JWKS cannot be fetched', { cause: error });
    }
  };
}

function tokenProblem(error: InstanceType<typeof joseErrors.JOSEError>): string {
  if (error instanceof joseErrors.JWTExpired) return 'the token has expired';
  if (error instanceof joseErrors.JWTClaimValidationFailed) return `the token's ${error.claim} claim is not valid`;
  return 'the token is not valid';
}
