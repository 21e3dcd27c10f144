import { createHash } from 'node:crypto';
import type { Pool } from '../infra/postgres.js';
import { ServiceError } from '../errors.js';

/** Replays are kept for a day; a request still "processing" after a minute is taken as abandoned. */
const retentionHours = 24;
const abandonedAfterSeconds = 60;

export const idempotencySchema = `
CREATE TABLE IF NOT EXISTS idempotency_keys (
  subject text NOT NULL,
  key text NOT NULL,
  request_hash text NOT NULL,
  response_status int,
  response_body jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (subject, key)
);
`;

export type StoredResponse = { status: number; body: unknown };

const validKey = /^[\x21-\x7e]{1,255}$/;

/**
 * `Idempotency-Key` on commands (contract §2): the first request with a key runs and its answer is
 * kept per caller; a repeat with the same request gets that answer again, a repeat while the first
 * still runs gets 409 `conflict`, and the same key with a different request gets 422.
 */
export class IdempotencyKeys {
  constructor(private readonly pool: Pool) {}

  static parseKey(header: string | string[] | undefined): string | undefined {
    if (header === undefined) return undefined;
    if (typeof header !== 'string' || !validKey.test(header)) {
      throw new ServiceError('bad_request', 'Idempotency-Key must be 1 to 255 visible ASCII characters');
    }
    return header;
  }

  static hash(query: string, params: unknown): string {
    return createHash('sha256').update(JSON.stringify([query, params])).digest('hex');
  }

  /** Claims the key for this request, or returns the answer to replay. */
  async begin(subject: string, key: string, requestHash: string): Promise<StoredResponse | undefined> {
    // A key claimed by a request that commits while this statement runs is invisible to its
    // snapshot; the next statement sees it.
    for (let attempt = 0; attempt < 3; attempt++) {
      const outcome = await this.tryBegin(subject, key, requestHash);
      if (outcome !== 'retry') return outcome;
    }
    throw new ServiceError('conflict', 'a request with this Idempotency-Key is still being processed');
  }

  private async tryBegin(subject: string, key: string, requestHash: string): Promise<StoredResponse | undefined | 'retry'> {
    const { rows } = await this.pool.query<{ claimed: boolean; request_hash: string; response_status: number | null; response_body: unknown }>(
      `WITH claimed AS (
         INSERT INTO idempotency_keys AS k (subject, key, request_hash) VALUES ($1, $2, $3)
         ON CONFLICT (subject, key) DO UPDATE SET request_hash = excluded.request_hash, response_status = NULL,
           response_body = NULL, created_at = now()
         WHERE k.created_at < now() - make_interval(hours => ${retentionHours})
            OR (k.response_status IS NULL AND k.created_at < now() - make_interval(secs => ${abandonedAfterSeconds}))
         RETURNING true AS claimed, request_hash, response_status, response_body
       )
       SELECT * FROM claimed
       UNION ALL
       SELECT false, request_hash, response_status, response_body FROM idempotency_keys
       WHERE subject = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM claimed)`,
      [subject, key, requestHash],
    );
    const row = rows[0];
    if (!row) return 'retry';
    if (row.claimed) return undefined;
    if (row.request_hash !== requestHash) {
      throw new ServiceError('idempotency_key_reused', 'this Idempotency-Key was used with a different request');
    }
    if (row.response_status === null) {
      throw new ServiceError('conflict', 'a request with this Idempotency-Key is still being processed');
    }
    return { status: row.response_status, body: row.response_body };
  }

  async complete(subject: string, key: string, response: StoredResponse): Promise<void> {
    await this.pool.query('UPDATE idempotency_keys SET response_status = $3, response_body = $4 WHERE subject = $1 AND key = $2', [
      subject,
      key,
      response.status,
      JSON.stringify(response.body),
    ]);
  }

  /** Releases the key after a failure that a retry may not repeat (5xx). */
  async release(subject: string, key: string): Promise<void> {
    await this.pool.query('DELETE FROM idempotency_keys WHERE subject = $1 AND key = $2 AND response_status IS NULL', [subject, key]);
  }
}
