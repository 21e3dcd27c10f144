/**
 * A process of test/int/integrity/signing-key.int.test.ts: from the instant given, loads the
 * generated signing key of a fresh directory each 40 ms, as other processes do the same at once,
 * and prints each round's key id, or `failed` and why.
 */
import { loadSigningKey } from '../../src/integrity/adapters/signing-key.js';

const [base, startAt, rounds] = [process.argv[2]!, Number(process.argv[3]), Number(process.argv[4])];
const lines: string[] = [];
for (let round = 0; round < rounds; round++) {
  const at = startAt + round * 40;
  // Every process begins the round at the same instant: a timer would be late by more than the race lasts.
  while (Date.now() < at);
  lines.push(
    await loadSigningKey(undefined, `${base}/${round}`).then(
      (key) => key.keyId,
      (error: Error) => `failed: ${error.message}`,
    ),
  );
}
process.stdout.write(`${lines.join('\n')}\n`);
