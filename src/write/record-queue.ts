/**
 * Commands on one record wait their turn here instead of racing each other to the store (issue 21):
 * while one group of a record's commands is being decided and appended, the commands that arrive
 * wait, and go together as the next group. Records do not wait for each other. No I/O and no
 * timers: what a group does is `runGroup`'s, and how a paced record waits is `pacing.wait`'s.
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
};

export class RecordQueues<Job extends Queued> {
  /** Per record, the commands not yet taken into a group. A record is here while a group of it runs or waits for its pace. */
  private readonly waiting = new Map<string, Job[]>();

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
  }

  /** Commands waiting on `key`, not counting the group being run. */
  waitingOn(key: string): number {
    return this.waiting.get(key)?.length ?? 0;
  }

  /** Records with a group running or waiting for its pace. */
  get busyRecords(): number {
    return this.waiting.size;
  }

  /** Starts the record's next group: at once, or once its pace allows, with the commands waiting then. */
  private start(key: string): void {
    const { pacing, maxGroup } = this.options;
    const delay = pacing?.pace.delayFor(key, Math.min(maxGroup, this.waiting.get(key)!.length)) ?? 0;
    if (delay > 0) void pacing!.wait(delay).then(() => this.take(key));
    else this.take(key);
  }

  private take(key: string): void {
    const { maxGroup, pacing } = this.options;
    const group = this.waiting.get(key)!.splice(0, pacing ? Math.min(maxGroup, pacing.pace.allowance(key)) : maxGroup);
    pacing?.pace.charge(key, group.length);
    this.run(key, group);
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
