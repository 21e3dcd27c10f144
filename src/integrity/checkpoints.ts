import { createHash, createPrivateKey, createPublicKey, sign, verify, type KeyObject } from 'node:crypto';
import { canonicalJson } from './hashes.js';

/**
 * Signed checkpoints (contract §16): an organization's tree size and root at an instant, signed
 * with Ed25519 over the RFC 8785 canonical JSON of exactly those four fields.
 */

export type CheckpointBody = { organization_id: string; size: number; root_hash: string; timestamp: string };
export type Checkpoint = CheckpointBody & { key_id: string; signature: string };

/** A public key as `/audit-keys` publishes it (RFC 7517, RFC 8037). */
export type PublicJwk = { kty: 'OKP'; crv: 'Ed25519'; x: string; kid: string; alg: 'EdDSA'; use: 'sig' };

export type SigningKey = { keyId: string; privateKey: KeyObject; publicJwk: PublicJwk };

/** The bytes a checkpoint's signature covers. */
const signedBytes = ({ organization_id, size, root_hash, timestamp }: CheckpointBody) =>
  Buffer.from(canonicalJson({ organization_id, size, root_hash, timestamp }), 'utf8');

/** RFC 7638 thumbprint of the public key: the key id, the same wherever the key is loaded. */
function thumbprint(x: string): string {
  return createHash('sha256')
    .update(canonicalJson({ crv: 'Ed25519', kty: 'OKP', x }))
    .digest('base64url');
}

/** The signing key from its PKCS#8 PEM text (AUDIT_SIGNING_KEY, or the file the embedded default keeps). */
export function signingKeyFromPem(pem: string): SigningKey {
  const privateKey = createPrivateKey(pem);
  if (privateKey.asymmetricKeyType !== 'ed25519') throw new Error('the audit signing key must be an Ed25519 private key');
  const { x } = createPublicKey(privateKey).export({ format: 'jwk' });
  const keyId = thumbprint(x!);
  return { keyId, privateKey, publicJwk: { kty: 'OKP', crv: 'Ed25519', x: x!, kid: keyId, alg: 'EdDSA', use: 'sig' } };
}

export function signCheckpoint(body: CheckpointBody, key: SigningKey): Checkpoint {
  const signature = sign(null, signedBytes(body), key.privateKey).toString('base64url');
  return {
    organization_id: body.organization_id,
    size: body.size,
    root_hash: body.root_hash,
    timestamp: body.timestamp,
    key_id: key.keyId,
    signature,
  };
}

/** Whether `checkpoint` carries a valid signature by the key of its `key_id` among `keys`. */
export function checkpointSignatureValid(checkpoint: Checkpoint, keys: readonly PublicJwk[]): boolean {
  const jwk = keys.find((key) => key.kid === checkpoint.key_id);
  if (!jwk) return false;
  const publicKey = createPublicKey({ key: { kty: jwk.kty, crv: jwk.crv, x: jwk.x }, format: 'jwk' });
  return verify(null, signedBytes(checkpoint), publicKey, Buffer.from(checkpoint.signature, 'base64url'));
}
