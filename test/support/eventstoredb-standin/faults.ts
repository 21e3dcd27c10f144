/** Faults the stand-in can be told to inject, each one a failure the adapter documents how it handles. */

/** The kinds of call the adapter makes, as the stand-in tells them apart. */
export type CallKind = 'server-features' | 'append' | 'read-stream' | 'read-all' | 'subscribe';

export type Fault =
  /** The node is not ready or is going away: UNAVAILABLE (RpcExceptions.ServerNotReady). */
  | { kind: 'unavailable' }
  /**
   * A follower: writes and reads that require the leader answer NotLeader with the leader's
   * endpoint (RpcExceptions.LeaderInfo); other reads are served.
   */
  | { kind: 'not-leader'; leader: { host: string; port: number } }
  /**
   * Appends only: the node answers that it is not ready, as it does for a batch
   * (a google.rpc.Status "Server Is Not Ready" with no code) or for a single append (UNAVAILABLE).
   */
  | { kind: 'not-ready' }
  /**
   * The node answers UNKNOWN with these details, as KurrentDB does both for an election with no
   * leader known yet ("No leader info available in response", RpcExceptions.NoLeaderInfo) and for
   * a request it refuses ("Unexpected OperationResult: ...", RpcExceptions.UnknownError).
   */
  | { kind: 'unknown'; details: string }
  /** The call is accepted and never answered, past any deadline: only the caller's own timer ends it. */
  | { kind: 'no-answer' }
  /** Appends only: the events are stored, then the call fails as a dropped connection would, so the answer is lost. */
  | { kind: 'lose-answer' }
  /** Reads only: the call is served after `ms`, as by a busy node or over a long link. */
  | { kind: 'slow'; ms: number };

type Armed = { on: Set<CallKind>; fault: Fault; remaining: number };

export class Faults {
  private armed: Armed[] = [];

  /** Applies `fault` to the next `times` calls of the given kinds (every call until cleared by default). */
  inject(on: CallKind | CallKind[], fault: Fault, times = Number.POSITIVE_INFINITY): void {
    this.armed.push({ on: new Set(Array.isArray(on) ? on : [on]), fault, remaining: times });
  }

  clear(): void {
    this.armed = [];
  }

  /** The fault this call meets, if any; `requiresLeader` says whether a follower would refuse it. */
  take(call: CallKind, requiresLeader: boolean): Fault | undefined {
    const armed = this.armed.find((candidate) => candidate.on.has(call) && (candidate.fault.kind !== 'not-leader' || requiresLeader));
    if (!armed) return undefined;
    armed.remaining -= 1;
    if (armed.remaining <= 0) this.armed = this.armed.filter((candidate) => candidate !== armed);
    return armed.fault;
  }
}
