/** Waits `ms`, or less if `signal` aborts first: a loop that sleeps between rounds stops at once. Never rejects. */
export function sleepUnlessAborted(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done);
    if (signal.aborted) done();
  });
}
