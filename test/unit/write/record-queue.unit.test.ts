import { describe, expect, it } from 'vitest';
import { RecordQueueFull, RecordQueues } from '../../../src/write/record-queue.js';

type Job = { name: string; fail: (error: unknown) => void };

/** A queue whose groups are recorded and finish only when the test says so. */
function queueUnderTest(limit = 3, maxGroup = 10) {
  const groups: { key: string; names: string[]; finish: (error?: Error) => void }[] = [];
  const failed: string[] = [];
  const queues = new RecordQueues<Job>({
    limit,
    maxGroup,
    runGroup: (key, jobs) =>
      new Promise<void>((resolve, reject) =>
        groups.push({ key, names: jobs.map((job) => job.name), finish: (error) => (error ? reject(error) : resolve()) }),
      ),
  });
  const job = (name: string): Job => ({ name, fail: () => failed.push(name) });
  const settle = () => new Promise((resolve) => setImmediate(resolve));
  return { queues, groups, failed, job, settle };
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
});
