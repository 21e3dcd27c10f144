/**
 * Commands on one record wait their turn here instead of racing each other to the store (issue 21):
 * while one group of a record's commands is being decided and appended, the commands that arrive
 * wait, and go together as the next group. Records do not wait for each other. No I/O and no
 * timers: what a group does is `runGroup`'s, and how a record waits is `pacing.wait`'s and
 * `gathering.wait`'s.
 */
import type { RecordPace } from './record-pace.js';

/** A queued command: whoever runs its group settles it; `fail` is also how the queue ends it should its group throw. */
export type Queued = { fail: (error: unknown) => void };

/** One more command than the limit on one record: refused, not queued. */
export class RecordQueueFull extends Error {
  constructor(
    readonly key: string,
    readonly waiting: number,
  ) {
    super(`${waiting} commands already wait on ${key}`);
    this.name = 'RecordQueueFull';
  }
}

export type RecordQueueOptions<Job extends Queued> = {
  /** How many commands may wait on one record (not counting the group being run); one more is refused. */
  limit: number;
  /** The most commands one group takes; the rest wait for the next. */
  maxGroup: number;
  /** Decides and appends `jobs`, in order, settling each; one group of a record at a time. */
  runGroup: (key: string, jobs: Job[]) => Promise<void>;
  /** A record over its rate waits this long before its next group (none: records are not paced). */
  pacing?: { pace: RecordPace; wait: (milliseconds: number) => Promise<void> };
  /**
   * After a group of several commands, the record's next group waits for as many, up to `withinMs`
   * after that group started (none: a group starts with whatever waits). Concurrent writers of one
   * record are answered together and come back within a few milliseconds of each other: without
   * this, the first one back goes alone and the others make the next group, and a storm goes in
   * groups of a few, each an append and a projector batch of its own, which cost the instance the
   * CPU its other requests need. A lone writer's groups are of one, so it never waits.
   */
  gathering?: { withinMs: number; now: () => number; wait: (milliseconds: number) => Promise<void> };
};

export class RecordQueues<Job extends Queued> {
  /** Per record, the commands not yet taken into a group. A record is here while a group of it runs, waits for its pace or is held to gather. */
  private readonly waiting = new Map<string, Job[]>();
  /**
   * Per record whose last group had several commands, recently: its size and when it started; kept
   * in the order started, so that those past `gathering.withinMs` are forgotten from the front.
   */
  private readonly lastGroups = new Map<string, { size: number; startedAt: number }>();
  /**
   * Records held back to gather their next group, each with how many commands end the hold (its
   * own copy: the record's last group may be forgotten meanwhile), an object that is also the
   * hold's token (a hold ended early leaves its timer nothing to do).
   */
  private readonly holds = new Map<string, { commands: number }>();

  constructor(private readonly options: RecordQueueOptions<Job>) {}

  /** Queues `job` on `key`, and runs it at once if nothing runs on `key`. Throws RecordQueueFull at the limit. */
  enqueue(key: string, job: Job): void {
    const queue = this.waiting.get(key);
    if (!queue) {
      this.waiting.set(key, [job]);
      this.start(key);
      return;
    }
    if (queue.length >= this.options.limit) throw new RecordQueueFull(key, queue.length);
    queue.push(job);
    const hold = this.holds.get(key);
    if (hold && queue.length >= hold.commands) {
      this.holds.delete(key);
      this.pace(key);
    }
  }

  /** Commands waiting on `key`, not counting the group being run. */
  waitingOn(key: string): number {
    return this.waiting.get(key)?.length ?? 0;
  }

  /** Records with a group running, waiting for its pace or held to gather. */
  get busyRecords(): number {
    return this.waiting.size;
  }

  /** Starts the record's next group, once as many commands as its last group had wait (or the gathering's time is up), and its pace allows. */
  private start(key: string): void {
    const last = this.lastGroups.get(key);
    const delay = this.gatheringDelay(key, last);
    if (!last || delay <= 0) {
      this.pace(key);
      return;
    }
    const hold = { commands: last.size };
    this.holds.set(key, hold);
    void this.options.gathering!.wait(delay).then(() => {
      if (this.holds.get(key) !== hold) return;
      this.holds.delete(key);
      this.pace(key);
    });
  }

  /** Milliseconds the record's next group may still wait for its writers to come back (0: none). */
  private gatheringDelay(key: string, last: { size: number; startedAt: number } | undefined): number {
    const { gathering } = this.options;
    if (!gathering || !last || this.waiting.get(key)!.length >= last.size) return 0;
    return last.startedAt + gathering.withinMs - gathering.now();
  }

  /** Starts the record's next group: at once, or once its pace allows, with the commands waiting then. */
  private pace(key: string): void {
    const { pacing, maxGroup } = this.options;
    const delay = pacing?.pace.delayFor(key, Math.min(maxGroup, this.waiting.get(key)!.length)) ?? 0;
    if (delay > 0) void pacing!.wait(delay).then(() => this.take(key));
    else this.take(key);
  }

  private take(key: string): void {
    const { maxGroup, pacing } = this.options;
    const group = this.waiting.get(key)!.splice(0, pacing ? Math.min(maxGroup, pacing.pace.burst) : maxGroup);
    pacing?.pace.charge(key, group.length);
    this.noteGroup(key, group.length);
    this.run(key, group);
  }

  /** Remembers a group of several commands for the gathering of the record's next one. */
  private noteGroup(key: string, size: number): void {
    const { gathering } = this.options;
    if (!gathering) return;
    const now = gathering.now();
    for (const [record, last] of this.lastGroups) {
      if (last.startedAt + gathering.withinMs > now) break;
      this.lastGroups.delete(record);
    }
    this.lastGroups.delete(key);
    if (size > 1) this.lastGroups.set(key, { size, startedAt: now });
  }

  private run(key: string, group: Job[]): void {
    this.options.runGroup(key, group).then(
      () => this.next(key),
      (error: unknown) => {
        // runGroup settles its jobs; should it throw instead, none of them is left hanging.
        for (const job of group) job.fail(error);
        this.next(key);
      },
    );
  }

  private next(key: string): void {
    const queue = this.waiting.get(key)!;
    if (queue.length === 0) {
      this.waiting.delete(key);
      return;
    }
    this.start(key);
  }
}
