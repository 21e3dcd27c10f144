/**
 * How fast one record's commands may go at one instance (`RECORD_RATE_LIMIT`): a storm on one
 * record must not take the instance from every other record's requests (issue 21). A generic cell
 * rate algorithm: each record has a theoretical time for its next command, which every group moves
 * on by its commands' share of the rate; a group may start once that time is at most a burst's
 * worth ahead. A record under the rate never waits; one over it waits in its queue, where the
 * commands that arrive meanwhile join its next group. Pure: the clock comes in.
 */
export class RecordPace {
  /** Milliseconds one command is worth at the rate. */
  private readonly interval: number;
  /** How far ahead of the clock a record's time may run before its next group waits: a burst's worth. */
  private readonly tolerance: number;
  /**
   * Per record, the time at which the rate would allow its next command; kept in the order last
   * charged, so that those in the past (which impose nothing) are forgotten from the front.
   */
  private readonly next = new Map<string, number>();

  constructor(
    perSecond: number,
    burst: number,
    private readonly now: () => number,
  ) {
    this.interval = 1000 / perSecond;
    this.tolerance = burst * this.interval;
  }

  /** Milliseconds the record's next group must wait before it starts (0: at once). */
  delayFor(key: string): number {
    const at = this.next.get(key);
    return at === undefined ? 0 : Math.max(0, at - this.tolerance - this.now());
  }

  /**
   * How many commands the record's group may take now (at least one): those the rate and the
   * burst allow, so that a long queue goes a burst at a time and not in groups that run far ahead.
   */
  allowance(key: string): number {
    const now = this.now();
    const at = Math.max(this.next.get(key) ?? now, now);
    return Math.max(1, Math.floor((now + this.tolerance - at) / this.interval) + 1);
  }

  /** Counts a group of `commands` starting now against the record's rate. */
  charge(key: string, commands: number): void {
    const now = this.now();
    for (const [record, at] of this.next) {
      if (at > now) break;
      this.next.delete(record);
    }
    const from = Math.max(this.next.get(key) ?? now, now);
    this.next.delete(key);
    this.next.set(key, from + commands * this.interval);
  }

  /** Records whose rate still counts (their time is ahead of the clock). */
  get records(): number {
    return this.next.size;
  }
}
