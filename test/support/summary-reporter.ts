import type { Reporter, SerializedError, TestModule, TestSuite } from 'vitest/node';

type Counts = { passed: number; failed: number; skipped: number };

const line = (label: string, counts: Counts) => `${label}: ${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped\n`;

/** A file that could not load, or a `beforeAll`/`afterAll` that threw: one failure for each, beside its tests' own states. */
function errorsOutsideTests(module: TestModule): number {
  const suites: Array<TestModule | TestSuite> = [module, ...module.children.allSuites()];
  return suites.reduce((sum, suite) => sum + (suite.errors().length > 0 ? 1 : 0), 0);
}

/**
 * Ends the run with one plain line per project (unit, int, e2e, and the suites run again on
 * EventStoreDB), then `tests: N passed, N failed, N skipped` for the whole run, that any CI can read.
 * "failed" counts failed tests, files or hooks that failed outside a test, and errors no test
 * caught (an unhandled rejection, a global setup that threw), so it is never 0 on a failing run.
 */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<SerializedError>): void {
    const total: Counts = { passed: 0, failed: unhandledErrors.length, skipped: 0 };
    const byProject = new Map<string, Counts>();
    for (const module of testModules) {
      const name = module.project.name || 'tests';
      const counts = byProject.get(name) ?? { passed: 0, failed: 0, skipped: 0 };
      byProject.set(name, counts);
      const outside = errorsOutsideTests(module);
      counts.failed += outside;
      total.failed += outside;
      for (const test of module.children.allTests()) {
        const state = test.result().state;
        const key = state === 'passed' ? 'passed' : state === 'failed' ? 'failed' : 'skipped';
        counts[key] += 1;
        total[key] += 1;
      }
    }
    process.stdout.write('\n');
    for (const [name, counts] of byProject) process.stdout.write(line(`  ${name}`, counts));
    if (unhandledErrors.length > 0) process.stdout.write(`  errors outside any test: ${unhandledErrors.length}\n`);
    process.stdout.write(line('tests', total));
  }
}
