import { describe, expect, it } from 'vitest';
import { RecordPace } from '../../../src/write/record-pace.js';
import { RecordQueueFull, RecordQueues } from '../../../src/write/record-queue.js';

type Job = { name: string; fail: (error: unknown) => void };

/**
 * A queue whose groups are recorded and finish only when the test says so. Paced (`perSecond`) or
 * gathering (`gatherWithinMs`), its clock is the test's (`clock.now`), and a record's waits are
 * recorded (`waits` for its pace, `gatherings` to gather its group) and end when the test says so.
 */
function queueUnderTest(limit = 3, maxGroup = 10, pacing?: { perSecond: number; burst: number }, gatherWithinMs?: number) {
  const groups: { key: string; names: string[]; finish: (error?: Error) => void }[] = [];
  const failed: string[] = [];
  const clock = { now: 0 };
  const waits: { milliseconds: number; end: () => void }[] = [];
  const gatherings: { milliseconds: number; end: () => void }[] = [];
  const pace = pacing && new RecordPace(pacing.perSecond, pacing.burst, () => clock.now);
  const queues = new RecordQueues<Job>({
    limit,
    maxGroup,
    runGroup: (key, jobs) =>
      new Promise<void>((resolve, reject) =>
        groups.push({ key, names: jobs.map((job) => job.name), finish: (error) => (error ? reject(error) : resolve()) }),
      ),
    pacing: pace && {
      pace,
      wait: (milliseconds) => new Promise<void>((end) => waits.push({ milliseconds, end })),
    },
    gathering: gatherWithinMs
      ? {
          withinMs: gatherWithinMs,
          now: () => clock.now,
          wait: (milliseconds) => new Promise<void>((end) => gatherings.push({ milliseconds, end })),
        }
      : undefined,
  });
  const job = (name: string): Job => ({ name, fail: () => failed.push(name) });
  const settle = () => new Promise((resolve) => setImmediate(resolve));
  return { queues, groups, failed, job, settle, clock, waits, gatherings, pace };
}

/** a1 alone, then a2 and a3 as a group of two, both finished, at time 0: the record is idle again. */
async function groupOfTwoAtZero({ queues, groups, job, settle }: ReturnType<typeof queueUnderTest>) {
  queues.enqueue('workspace-a', job('a1'));
  queues.enqueue('workspace-a', job('a2'));
  queues.enqueue('workspace-a', job('a3'));
  groups[0]!.finish();
  await settle();
  groups[1]!.finish();
  await settle();
}

describe('RecordQueues', () => {
  it('given an idle record, when a command comes, then it runs at once as a group of one', () => {
    const { queues, groups, job } = queueUnderTest();
    queues.enqueue('workspace-a', job('first'));
    expect(groups).toEqual([expect.objectContaining({ key: 'workspace-a', names: ['first'] })]);
  });

  it('given a running group, when more commands come, then they wait and run together as the next group, in order', async () => {
    const { queues, groups, job, settle } = queueUnderTest();
    queues.enqueue('workspace-a', job('first'));
    queues.enqueue('workspace-a', job('second'));
    queues.enqueue('workspace-a', job('third'));
    expect(groups).toHaveLength(1);
    expect(queues.waitingOn('workspace-a')).toBe(2);
    groups[0]!.finish();
    await settle();
    expect(groups.map((group) => group.names)).toEqual([['first'], ['second', 'third']]);
    groups[1]!.finish();
    await settle();
    expect(queues.busyRecords).toBe(0);
  });

  it('given a busy record, when a command comes for another record, then it runs at once', () => {
    const { queues, groups, job } = queueUnderTest();
    queues.enqueue('workspace-a', job('a1'));
    queues.enqueue('workspace-a', job('a2'));
    queues.enqueue('workspace-b', job('b1'));
    expect(groups.map((group) => [group.key, group.names])).toEqual([
      ['workspace-a', ['a1']],
      ['workspace-b', ['b1']],
    ]);
  });

  it('given as many waiting commands as the limit, when one more comes, then it is refused and the others stay queued', async () => {
    const { queues, groups, job, settle } = queueUnderTest(2);
    queues.enqueue('workspace-a', job('running'));
    queues.enqueue('workspace-a', job('w1'));
    queues.enqueue('workspace-a', job('w2'));
    expect(() => queues.enqueue('workspace-a', job('w3'))).toThrow(RecordQueueFull);
    groups[0]!.finish();
    await settle();
    expect(groups[1]!.names).toEqual(['w1', 'w2']);
    // Room again once the waiting ones were taken.
    queues.enqueue('workspace-a', job('w4'));
    expect(queues.waitingOn('workspace-a')).toBe(1);
  });

  it('given more waiting commands than a group takes, then they run in groups of at most maxGroup', async () => {
    const { queues, groups, job, settle } = queueUnderTest(10, 2);
    for (const name of ['j0', 'j1', 'j2', 'j3', 'j4']) queues.enqueue('workspace-a', job(name));
    for (let index = 0; index < 3; index++) {
      groups[index]!.finish();
      await settle();
    }
    expect(groups.map((group) => group.names)).toEqual([['j0'], ['j1', 'j2'], ['j3', 'j4']]);
  });

  it('given a group that throws, then each of its commands fails and the next group still runs', async () => {
    const { queues, groups, failed, job, settle } = queueUnderTest();
    queues.enqueue('workspace-a', job('first'));
    queues.enqueue('workspace-a', job('second'));
    groups[0]!.finish(new Error('the store is gone'));
    await settle();
    expect(failed).toEqual(['first']);
    expect(groups[1]!.names).toEqual(['second']);
  });

  it('given a record under its rate, then its groups run at once, each after the one before', async () => {
    const { queues, groups, job, settle, clock, waits } = queueUnderTest(10, 10, { perSecond: 1000, burst: 5 });
    for (let index = 0; index < 5; index++) {
      clock.now += 1;
      queues.enqueue('workspace-a', job(`c${index}`));
      groups[index]!.finish();
      await settle();
    }
    expect(groups).toHaveLength(5);
    expect(waits).toEqual([]);
  });

  it('given a record over its rate, then its next group waits for its share of the rate, and takes the commands that came meanwhile', async () => {
    // 100 commands a second, a burst of 2: a command is worth 10 ms, 20 ms are tolerated.
    const { queues, groups, job, settle, clock, waits } = queueUnderTest(10, 10, { perSecond: 100, burst: 2 });
    queues.enqueue('workspace-a', job('a1'));
    queues.enqueue('workspace-a', job('a2'));
    groups[0]!.finish();
    await settle();
    // Within the burst: at once.
    expect(groups.map((group) => group.names)).toEqual([['a1'], ['a2']]);
    for (const name of ['a3', 'a4', 'a5']) queues.enqueue('workspace-a', job(name));
    groups[1]!.finish();
    await settle();
    // 20 ms charged at time 0; three more are 30 ms, of which 20 are tolerated: the group waits 20 ms for all three.
    expect(waits.map((wait) => wait.milliseconds)).toEqual([20]);
    queues.enqueue('workspace-a', job('a6'));
    expect(queues.waitingOn('workspace-a')).toBe(4);
    // Another record is not held back meanwhile.
    queues.enqueue('workspace-b', job('b1'));
    expect(groups.at(-1)!.names).toEqual(['b1']);
    clock.now = 20;
    waits[0]!.end();
    await settle();
    // A burst's worth goes (three commands); the one that came meanwhile waits for its share.
    expect(groups.at(-1)!.names).toEqual(['a3', 'a4', 'a5']);
    groups.at(-1)!.finish();
    await settle();
    expect(waits.map((wait) => wait.milliseconds)).toEqual([20, 10]);
    clock.now = 30;
    waits[1]!.end();
    await settle();
    expect(groups.filter((group) => group.key === 'workspace-a').map((group) => group.names)).toEqual([
      ['a1'],
      ['a2'],
      ['a3', 'a4', 'a5'],
      ['a6'],
    ]);
  });

  it('given a long queue on a paced record, then its groups take a burst at a time, at the rate', async () => {
    const { queues, groups, job, settle, clock, waits } = queueUnderTest(20, 10, { perSecond: 100, burst: 2 });
    queues.enqueue('workspace-a', job('a0'));
    for (let index = 1; index <= 9; index++) queues.enqueue('workspace-a', job(`a${index}`));
    groups[0]!.finish();
    await settle();
    expect(waits.map((wait) => wait.milliseconds)).toEqual([10]);
    clock.now = 10;
    waits[0]!.end();
    await settle();
    expect(groups.map((group) => group.names)).toEqual([['a0'], ['a1', 'a2', 'a3']]);
    groups[1]!.finish();
    await settle();
    // Three commands every 30 ms: 100 a second.
    expect(waits.map((wait) => wait.milliseconds)).toEqual([10, 30]);
  });

  it('given a paced record that went quiet, then it is forgotten once its rate no longer counts, and runs at once again', async () => {
    const { queues, groups, job, settle, clock, waits, pace } = queueUnderTest(10, 10, { perSecond: 100, burst: 1 });
    queues.enqueue('workspace-a', job('a1'));
    queues.enqueue('workspace-a', job('a2'));
    groups[0]!.finish();
    await settle();
    groups[1]!.finish();
    await settle();
    expect(pace!.records).toBe(1);
    clock.now = 1000;
    queues.enqueue('workspace-b', job('b1'));
    expect(pace!.records).toBe(1);
    queues.enqueue('workspace-a', job('a3'));
    expect(groups.at(-1)!.names).toEqual(['a3']);
    expect(waits).toEqual([]);
  });
  it('given a paced record whose group waited for its rate, then the group also takes what came meanwhile, up to a burst, and the next waits the longer', async () => {
    // 100 commands a second, a burst of 4: a command is worth 10 ms, 40 ms are tolerated, five go at once at most.
    const { queues, groups, job, settle, clock, waits } = queueUnderTest(20, 10, { perSecond: 100, burst: 4 });
    queues.enqueue('workspace-a', job('a0'));
    for (const name of ['a1', 'a2', 'a3', 'a4']) queues.enqueue('workspace-a', job(name));
    groups[0]!.finish();
    await settle();
    // Within the burst: at once; the record's time is now 50 ms.
    expect(groups.map((group) => group.names)).toEqual([['a0'], ['a1', 'a2', 'a3', 'a4']]);
    for (const name of ['a5', 'a6', 'a7']) queues.enqueue('workspace-a', job(name));
    groups[1]!.finish();
    await settle();
    // Three more are 30 ms past 50, of which 40 are tolerated: 30 ms to wait, during which two more come.
    expect(waits.map((wait) => wait.milliseconds)).toEqual([30]);
    for (const name of ['a8', 'a9', 'a10']) queues.enqueue('workspace-a', job(name));
    clock.now = 30;
    waits[0]!.end();
    await settle();
    // One group of a burst (five), rather than the three the rate allowed at that moment.
    expect(groups.at(-1)!.names).toEqual(['a5', 'a6', 'a7', 'a8', 'a9']);
    groups.at(-1)!.finish();
    await settle();
    // The record's time is 100 ms: the last one waits until 100 - 40 = 60.
    expect(waits.map((wait) => wait.milliseconds)).toEqual([30, 30]);
  });

  it('given a group of several commands, when its writers come back one by one, then the next group waits for as many, not going with the first alone', async () => {
    const under = queueUnderTest(10, 10, undefined, 10);
    const { queues, groups, job, settle, clock, gatherings } = under;
    await groupOfTwoAtZero(under);
    expect(queues.busyRecords).toBe(0);
    clock.now = 2;
    queues.enqueue('workspace-a', job('a4'));
    // The group of two started at 0: the next may wait until 10 for a second command.
    expect(gatherings.map((gathering) => gathering.milliseconds)).toEqual([8]);
    expect(groups).toHaveLength(2);
    // Other records are not held back meanwhile.
    queues.enqueue('workspace-b', job('b1'));
    expect(groups.at(-1)!.names).toEqual(['b1']);
    clock.now = 3;
    queues.enqueue('workspace-a', job('a5'));
    expect(groups.at(-1)!.names).toEqual(['a4', 'a5']);
    // The hold's timer ending later starts nothing more.
    gatherings[0]!.end();
    await settle();
    expect(groups.filter((group) => group.key === 'workspace-a').map((group) => group.names)).toEqual([['a1'], ['a2', 'a3'], ['a4', 'a5']]);
  });

  it('given a group of several commands, when fewer come back within the gathering time, then the next group goes with those that came', async () => {
    const under = queueUnderTest(10, 10, undefined, 10);
    const { queues, groups, job, settle, clock, gatherings } = under;
    await groupOfTwoAtZero(under);
    clock.now = 4;
    queues.enqueue('workspace-a', job('a4'));
    expect(gatherings.map((gathering) => gathering.milliseconds)).toEqual([6]);
    clock.now = 10;
    gatherings[0]!.end();
    await settle();
    expect(groups.at(-1)!.names).toEqual(['a4']);
    groups.at(-1)!.finish();
    await settle();
    // After a group of one the record does not wait.
    clock.now = 11;
    queues.enqueue('workspace-a', job('a5'));
    expect(groups.at(-1)!.names).toEqual(['a5']);
    expect(gatherings).toHaveLength(1);
  });

  it('given a lone writer, then each of its commands runs at once: its groups are of one', async () => {
    const { queues, groups, job, settle, clock, gatherings } = queueUnderTest(10, 10, undefined, 10);
    for (let index = 0; index < 3; index++) {
      clock.now += 1;
      queues.enqueue('workspace-a', job(`c${index}`));
      expect(groups).toHaveLength(index + 1);
      groups[index]!.finish();
      await settle();
    }
    expect(gatherings).toEqual([]);
  });

  it("given a group of several commands long ago, then the record's next command runs at once", async () => {
    const under = queueUnderTest(10, 10, undefined, 10);
    const { queues, groups, job, clock, gatherings } = under;
    await groupOfTwoAtZero(under);
    clock.now = 10;
    queues.enqueue('workspace-a', job('a4'));
    expect(groups.at(-1)!.names).toEqual(['a4']);
    expect(gatherings).toEqual([]);
  });
  it("given a record held to gather its group, when another record's group forgets it meanwhile, then a command on it still queues and the group goes", async () => {
    const under = queueUnderTest(10, 10, undefined, 10);
    const { queues, groups, job, settle, clock, gatherings } = under;
    await groupOfTwoAtZero(under);
    clock.now = 2;
    queues.enqueue('workspace-a', job('a4'));
    expect(gatherings).toHaveLength(1);
    // Its timer is late, as in a busy event loop: another record's group, past the gathering time, forgets what a's was.
    clock.now = 11;
    queues.enqueue('workspace-b', job('b1'));
    expect(() => queues.enqueue('workspace-a', job('a5'))).not.toThrow();
    expect(groups.at(-1)!.names).toEqual(['a4', 'a5']);
    gatherings[0]!.end();
    await settle();
    expect(groups.filter((group) => group.key === 'workspace-a').map((group) => group.names)).toEqual([['a1'], ['a2', 'a3'], ['a4', 'a5']]);
  });
});
