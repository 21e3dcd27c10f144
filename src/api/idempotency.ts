import { createHash, randomUUID } from 'node:crypto';
import type { Pool } from '../infra/postgres.js';
import { ServiceError } from '../errors.js';

/**
 * Answers are kept for a day. A request still processing renews its claim every few seconds; a
 * claim not renewed for `abandonedAfterSeconds` belonged to a process that died, and a retry may
 * take it over.
 */
const retentionHours = 24;
const heartbeatMs = 5000;
const abandonedAfterSeconds = 30;

export const idempotencySchema = `
CREATE TABLE IF NOT EXISTS idempotency_keys (
  subject text NOT NULL,
  key text NOT NULL,
  request_hash text NOT NULL,
  claim uuid NOT NULL,
  heartbeat_at timestamptz NOT NULL DEFAULT now(),
  response_status int,
  -- json, not jsonb: a replay keeps the field order of the first answer.
  response_body json,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (subject, key)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_by_age ON idempotency_keys (created_at);
`;

export type StoredResponse = { status: number; body: unknown };

/** A key this request holds: it renews the claim while the command runs, then completes or releases it. */
export type Claim = {
  complete(response: StoredResponse): Promise<void>;
  /** Gives the key back so a retry runs again; only safe when the command had no effect. */
  release(): Promise<void>;
  /** Stops renewing: after a failure whose effect is unknown, a retry may take over once the claim lapses. */
  abandon(): void;
};

const validKey = /^[\x21-\x7e]{1,255}$/;

/**
 * `Idempotency-Key` on commands (contract §2): the first request with a key runs and its answer is
 * kept per caller; a repeat with the same request gets that answer again, a repeat while the first
 * still runs gets 409 `conflict`, and the same key with a different request gets 422.
 */
export class IdempotencyKeys {
  private lastPurge = 0;

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
  async begin(subject: string, key: string, requestHash: string): Promise<{ claim: Claim } | { replay: StoredResponse }> {
    this.purgeExpired();
    // A key claimed by a request that commits while this statement runs is invisible to its
    // snapshot; the next statement sees it.
    for (let attempt = 0; attempt < 3; attempt++) {
      const outcome = await this.tryBegin(subject, key, requestHash);
      if (outcome !== 'retry') return outcome;
    }
    throw new ServiceError('conflict', 'a request with this Idempotency-Key is still being processed');
  }

  private async tryBegin(subject: string, key: string, requestHash: string): Promise<{ claim: Claim } | { replay: StoredResponse } | 'retry'> {
    const claim = randomUUID();
    const { rows } = await this.pool.query<{ claimed: boolean; request_hash: string; response_status: number | null; response_body: unknown }>(
      `WITH claimed AS (
         INSERT INTO idempotency_keys AS k (subject, key, request_hash, claim) VALUES ($1, $2, $3, $4)
         ON CONFLICT (subject, key) DO UPDATE SET request_hash = excluded.request_hash, claim = excluded.claim,
           heartbeat_at = now(), response_status = NULL, response_body = NULL, created_at = now()
         WHERE k.created_at < now() - make_interval(hours => ${retentionHours})
            OR (k.response_status IS NULL AND k.request_hash = excluded.request_hash
                AND k.heartbeat_at < now() - make_interval(secs => ${abandonedAfterSeconds}))
         RETURNING true AS claimed, request_hash, response_status, response_body
       )
       SELECT * FROM claimed
       UNION ALL
       SELECT false, request_hash, response_status, response_body FROM idempotency_keys
       WHERE subject = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM claimed)`,
      [subject, key, requestHash, claim],
    );
    const row = rows[0];
    if (!row) return 'retry';
    if (row.claimed) return { claim: this.holdClaim(subject, key, claim) };
    if (row.request_hash !== requestHash) {
      throw new ServiceError('idempotency_key_reused', 'this Idempotency-Key was used with a different request');
    }
    if (row.response_status === null) {
      throw new ServiceError('conflict', 'a request with this Idempotency-Key is still being processed');
    }
    return { replay: { status: row.response_status, body: row.response_body } };
  }

  private holdClaim(subject: string, key: string, claim: string): Claim {
    const owned = 'subject = $1 AND key = $2 AND claim = $3';
    const heartbeat = setInterval(() => {
      this.pool.query(`UPDATE idempotency_keys SET heartbeat_at = now() WHERE ${owned}`, [subject, key, claim]).catch(() => undefined);
    }, heartbeatMs);
    heartbeat.unref();
    return {
      complete: async (response) => {
        clearInterval(heartbeat);
        await this.pool.query(`UPDATE idempotency_keys SET response_status = $4, response_body = $5 WHERE ${owned}`, [
          subject,
          key,
          claim,
          response.status,
          JSON.stringify(response.body),
        ]);
      },
      release: async () => {
        clearInterval(heartbeat);
        await this.pool.query(`DELETE FROM idempotency_keys WHERE ${owned} AND response_status IS NULL`, [subject, key, claim]);
      },
      abandon: () => clearInterval(heartbeat),
    };
  }

  /** Deletes expired keys now and then, in the background, a bounded batch at a time. */
  private purgeExpired(): void {
    if (Date.now() - this.lastPurge < 60_000) return;
    this.lastPurge = Date.now();
    this.pool
      .query(
        `DELETE FROM idempotency_keys WHERE ctid IN (
           SELECT ctid FROM idempotency_keys WHERE created_at < now() - make_interval(hours => ${retentionHours}) LIMIT 10000)`,
      )
      .catch(() => undefined);
  }
}
