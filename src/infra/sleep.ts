/**
 * `work`'s outcome, or a rejection with the signal's reason as soon as `signal` aborts: a loop
 * stops without waiting for a call that may not end for a long time (a store that takes the
 * connection and never answers). The call's own outcome, later, is dropped.
 */
export function unlessAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    work.catch(() => undefined);
    return Promise.reject(signal.reason as Error);
  }
  return new Promise<T>((resolve, reject) => {
    const aborted = () => {
      // Its failure, once the store is closed, has no one left to tell.
      work.catch(() => undefined);
      reject(signal.reason as Error);
    };
    signal.addEventListener('abort', aborted, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', aborted);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', aborted);
        reject(error as Error);
      },
    );
  });
}

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
