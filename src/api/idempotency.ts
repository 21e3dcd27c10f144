import { createHash, randomUUID } from 'node:crypto';
import { canonicalJson, sha256Hex } from '../integrity/hashes.js';
import type { Pool } from '../infra/postgres.js';
import { ServiceError } from '../errors.js';
import { idempotencyKeyPattern } from './schemas.js';

/** How many times a claim's move to the holder's new session is tried before it is given up (and logged). */
const reattachAttempts = 5;

export const claimsNotMoved = "idempotency claims not moved to the instance's new database session";

/** Answers are kept for a day. */
const retentionHours = 24;

/**
 * The database session that stands for a live instance (its LISTEN connection): a claim belongs to
 * it, and is free the moment that session ends, which it does when the process dies.
 */
export type ClaimHolder = () => { pid: number; startedAt: string } | undefined;

export type StoredResponse = { status: number; body: unknown };

/** A request's fingerprints (IdempotencyKeys.hashes). */
export type RequestHashes = { asSent: string; canonical: string };

/** A key this request holds while its command runs; it then keeps the answer or gives the key back. */
export type Claim = {
  complete(response: StoredResponse): Promise<void>;
  /**
   * Gives the key back so a retry runs at once. Safe whatever the command did: a keyed command's
   * events carry its id, so a retry answers what was stored instead of doing it again. The key
   * keeps the request (its hashes, from which that id is made) for its day, unless the command is
   * known to have done nothing (`ranNothing`): then the key is free for any request.
   */
  release(options?: { ranNothing?: boolean }): Promise<void>;
};

/**
 * `Idempotency-Key` on commands (contract §2): the first request with a key runs and its answer is
 * kept per caller; a repeat with the same request gets that answer again, a repeat while the first
 * still runs gets 409 `conflict`, and the same key with a different request gets 422. A claim whose
 * holder's database session is gone (the instance died, or PostgreSQL restarted) is taken over at
 * once by a retry. This table only saves work and answers 409: that a command runs once rests on
 * its events, which carry the keyed request's id (src/write/execute.ts).
 */
export class IdempotencyKeys {
  private lastPurge = 0;
  /** The claims this instance holds now (claim id → the caller's key): moved to the holder's new session when it reconnects. */
  private readonly held = new Map<string, { subject: string; key: string }>();

  constructor(
    private readonly pool: Pool,
    private readonly holder: ClaimHolder,
    /**
     * Told when work in the background failed: deleting expired keys (the next request a minute
     * later tries again), or moving claims to a new session (a retry elsewhere may then take one over).
     */
    private readonly onBackgroundFailure?: (error: Error, what: string) => void,
  ) {}

  static parseKey(header: string | string[] | undefined): string | undefined {
    if (header === undefined) return undefined;
    if (typeof header !== 'string' || !idempotencyKeyPattern.test(header)) {
      throw new ServiceError('bad_request', 'Idempotency-Key must be 1 to 255 visible ASCII characters');
    }
    return header;
  }

  /**
   * A request's two fingerprints. `asSent`: its members in the order sent, the one every release
   * has kept, so that instances of releases side by side (a rolling deploy) agree, and from which
   * the command's id is made (a retry that another release answered finds the same events).
   * `canonical`: its RFC 8785 canonical JSON, which a retry whose members come in another order
   * (JSON gives their order no meaning) shares.
   */
  static hashes(query: string, params: unknown): RequestHashes {
    return { asSent: sha256Hex(JSON.stringify([query, params])), canonical: sha256Hex(canonicalJson([query, params])) };
  }

  /** The id of one caller's keyed request, which its events carry (EventMetadata.command_id). */
  static commandId(subject: string, key: string, requestHash: string): string {
    return createHash('sha256')
      .update(JSON.stringify([subject, key, requestHash]))
      .digest('base64url');
  }

  /**
   * Claims the key for this request, or returns the answer to replay. The claim comes with the
   * as-sent hash the key holds, the first request's, from which the command's id is made.
   */
  async begin(
    subject: string,
    key: string,
    hashes: RequestHashes,
  ): Promise<{ claim: Claim; requestHash: string } | { replay: StoredResponse }> {
    this.purgeExpired();
    // A key claimed by a request that commits while this statement runs is invisible to its
    // snapshot; the next statement sees it.
    for (let attempt = 0; attempt < 3; attempt++) {
      const outcome = await this.tryBegin(subject, key, hashes);
      if (outcome !== 'retry') return outcome;
    }
    throw new ServiceError('conflict', 'a request with this Idempotency-Key is still being processed');
  }

  private async tryBegin(
    subject: string,
    key: string,
    { asSent, canonical }: RequestHashes,
  ): Promise<{ claim: Claim; requestHash: string } | { replay: StoredResponse } | 'retry'> {
    const claim = randomUUID();
    const holder = this.holder();
    const { rows } = await this.pool.query<{
      claimed: boolean;
      request_hash: string;
      canonical_hash: string | null;
      response_status: number | null;
      response_body: unknown;
    }>(
      // A key taken over (from a dead holder, or given back) keeps its hashes: the events its
      // command may have written carry the id made from them. Keys of releases before
      // canonical_hash have none, and match only the same members in the same order.
      `WITH claimed AS (
         INSERT INTO idempotency_keys AS k (subject, key, request_hash, canonical_hash, claim, holder_pid, holder_started)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (subject, key) DO UPDATE SET
           request_hash = CASE WHEN k.created_at < now() - make_interval(hours => ${retentionHours})
                               THEN excluded.request_hash ELSE k.request_hash END,
           canonical_hash = CASE WHEN k.created_at < now() - make_interval(hours => ${retentionHours})
                                 THEN excluded.canonical_hash ELSE k.canonical_hash END,
           claim = excluded.claim, holder_pid = excluded.holder_pid, holder_started = excluded.holder_started,
           response_status = NULL, response_body = NULL, created_at = now()
         WHERE k.created_at < now() - make_interval(hours => ${retentionHours})
            OR (k.response_status IS NULL AND (k.request_hash = excluded.request_hash OR k.canonical_hash = excluded.canonical_hash)
                AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = k.holder_pid AND a.backend_start = k.holder_started))
         RETURNING true AS claimed, request_hash, canonical_hash, response_status, response_body
       )
       SELECT * FROM claimed
       UNION ALL
       SELECT false, request_hash, canonical_hash, response_status, response_body FROM idempotency_keys
       WHERE subject = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM claimed)`,
      [subject, key, asSent, canonical, claim, holder?.pid ?? null, holder?.startedAt ?? null],
    );
    const row = rows[0];
    if (!row) return 'retry';
    if (row.claimed) return { claim: this.holdClaim(subject, key, claim, holder), requestHash: row.request_hash };
    if (row.request_hash !== asSent && row.canonical_hash !== canonical) {
      throw new ServiceError('idempotency_key_reused', 'this Idempotency-Key was used with a different request');
    }
    if (row.response_status === null) {
      throw new ServiceError('conflict', 'a request with this Idempotency-Key is still being processed');
    }
    return { replay: { status: row.response_status, body: row.response_body } };
  }

  /**
   * Ties the claims this instance holds to its holder's current session. Called when that session
   * was replaced while the instance lives on (its connection was reset and made again): the claims
   * would otherwise look orphaned, and a retry would take one over while its request still runs.
   */
  async reattach(): Promise<void> {
    // The database may be as far as the connection that was reset: a few tries, a second apart and more.
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.moveClaimsToHolder();
      } catch (error) {
        if (attempt === reattachAttempts) throw error;
        await new Promise((resolve) => setTimeout(resolve, 500 * 2 ** attempt));
      }
    }
  }

  private async moveClaimsToHolder(): Promise<void> {
    const holder = this.holder();
    if (this.held.size === 0 || !holder) return;
    const claims = [...this.held];
    await this.pool.query(
      `UPDATE idempotency_keys k SET holder_pid = $4, holder_started = $5
       FROM unnest($1::text[], $2::text[], $3::uuid[]) AS h(subject, key, claim)
       WHERE k.subject = h.subject AND k.key = h.key AND k.claim = h.claim AND k.response_status IS NULL`,
      [
        claims.map(([, { subject }]) => subject),
        claims.map(([, { key }]) => key),
        claims.map(([claim]) => claim),
        holder.pid,
        holder.startedAt,
      ],
    );
  }

  private holdClaim(subject: string, key: string, claim: string, heldBy: ReturnType<ClaimHolder>): Claim {
    const owned = 'subject = $1 AND key = $2 AND claim = $3';
    this.held.set(claim, { subject, key });
    // The holder's session was replaced (or was down) while the claim was being written: a
    // reattachment run meanwhile did not know of this claim, so it is moved now.
    const now = this.holder();
    if (!heldBy || now?.pid !== heldBy.pid || now.startedAt !== heldBy.startedAt) {
      this.reattach().catch((error: unknown) => this.onBackgroundFailure?.(error as Error, claimsNotMoved));
    }
    return {
      complete: async (response) => {
        this.held.delete(claim);
        await this.pool.query(`UPDATE idempotency_keys SET response_status = $4, response_body = $5 WHERE ${owned}`, [
          subject,
          key,
          claim,
          response.status,
          JSON.stringify(response.body),
        ]);
      },
      // Kept, the key is held by nobody: a retry takes it over at once and keeps its hashes, so
      // that one whose members come in another order still makes the same command id.
      release: async ({ ranNothing = false } = {}) => {
        this.held.delete(claim);
        await this.pool.query(
          ranNothing
            ? `DELETE FROM idempotency_keys WHERE ${owned} AND response_status IS NULL`
            : `UPDATE idempotency_keys SET claim = gen_random_uuid(), holder_pid = NULL, holder_started = NULL
               WHERE ${owned} AND response_status IS NULL`,
          [subject, key, claim],
        );
      },
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
      .catch((error: unknown) => this.onBackgroundFailure?.(error as Error, 'expired idempotency keys not deleted; retrying in a minute'));
  }
}
