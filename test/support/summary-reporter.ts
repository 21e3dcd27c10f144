import type { Reporter, TestModule } from 'vitest/node';

type Counts = { passed: number; failed: number; skipped: number };

const line = (label: string, counts: Counts) => `${label}: ${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped\n`;

/**
 * Ends the run with one plain line per project (unit, int, e2e, and the suites run again on
 * EventStoreDB), then `tests: N passed, N failed, N skipped` for the whole run, that any CI can read.
 */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const total: Counts = { passed: 0, failed: 0, skipped: 0 };
    const byProject = new Map<string, Counts>();
    for (const module of testModules) {
      const name = module.project.name || 'tests';
      const counts = byProject.get(name) ?? { passed: 0, failed: 0, skipped: 0 };
      byProject.set(name, counts);
      for (const test of module.children.allTests()) {
        const state = test.result().state;
        const key = state === 'passed' ? 'passed' : state === 'failed' ? 'failed' : 'skipped';
        counts[key] += 1;
        total[key] += 1;
      }
    }
    process.stdout.write('\n');
    for (const [name, counts] of byProject) process.stdout.write(line(`  ${name}`, counts));
    process.stdout.write(line('tests', total));
  }
}
