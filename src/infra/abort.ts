/**
 * `waiting`, cut short should `signal` abort. The listener goes when the wait ends: loops (a change
 * stream, the webhook dispatcher) wait on one signal again and again for as long as they run.
 */
export async function waitUnlessAborted(waiting: Promise<unknown>, signal: AbortSignal | undefined): Promise<void> {
  if (!signal) {
    await waiting;
    return;
  }
  let onAbort: () => void = () => undefined;
  const abortion = new Promise<void>((resolve) => (onAbort = resolve));
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    await Promise.race([waiting, abortion]);
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}
