import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { link, mkdir, readFile, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { signingKeyFromPem, type SigningKey } from '../checkpoints.js';

/** Where a service without AUDIT_SIGNING_KEY keeps the key it generated, beside the development JWT secret. */
export const generatedKeyFile = 'audit-signing-key.pem';

/**
 * The key that signs checkpoints: AUDIT_SIGNING_KEY (a PKCS#8 PEM), or the one in the data
 * directory, generated there at the first start. Changing the key is a rotation: the old one stays
 * published, retired (src/integrity/adapters/tables.ts).
 */
export async function loadSigningKey(configured: string | undefined, dataDir: string): Promise<SigningKey> {
  if (configured !== undefined) return signingKeyFromPem(configured);
  const file = path.join(path.resolve(dataDir), generatedKeyFile);
  if (!existsSync(file)) {
    await mkdir(path.dirname(file), { recursive: true });
    const { privateKey } = generateKeyPairSync('ed25519');
    // Written whole under a name of its own, then linked into place: of two instances starting at
    // once on one directory, the second reads the first's key, never a file still being written
    // (as it could when the first created the file and then wrote it).
    const written = `${file}.${process.pid}.${randomUUID()}`;
    await writeFile(written, privateKey.export({ format: 'pem', type: 'pkcs8' }), { mode: 0o600 });
    try {
      await link(written, file).catch((error: NodeJS.ErrnoException) => {
        if (error.code !== 'EEXIST') throw error;
      });
    } finally {
      await unlink(written);
    }
  }
  return signingKeyFromPem(await readFile(file, 'utf8'));
}
