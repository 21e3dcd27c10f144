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
  /** The most commands one group may take at once: a burst's worth and one. */
  private readonly burstCells: number;
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
    this.burstCells = Math.floor(burst) + 1;
  }

  /**
   * Milliseconds the record's next group of `commands` must wait before it starts (0: at once):
   * until the rate allows them all, or a burst of them. Waiting for the group as a whole, not
   * for its first command, keeps a storm's groups large (one append, one projector batch for
   * many commands) rather than one command a millisecond.
   */
  delayFor(key: string, commands: number): number {
    const at = this.next.get(key);
    if (at === undefined) return 0;
    const cells = Math.min(Math.max(1, commands), this.burstCells);
    return Math.max(0, at + (cells - 1) * this.interval - this.tolerance - this.now());
  }

  /**
   * The most commands one group may take: a burst's worth and the one the rate allows now
   * (`floor(burst) + 1`). The group takes those that came while it waited for its pace too, which
   * puts its record's time further ahead, so that its next group waits the longer: the rate holds
   * on average, and a storm goes in few large groups.
   */
  get burst(): number {
    return this.burstCells;
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
