/** Callers whose windows are kept at most: beyond it, the oldest windows are forgotten first. */
const maxWindows = 100_000;
const windowMs = 60_000;

/**
 * Per-caller fixed-window limit (contract §1: off by default). In memory, so the limit applies per
 * instance; returns the seconds to wait when the caller is over it.
 */
export function createRateLimiter(perMinute: number): (subject: string) => number | undefined {
  if (perMinute <= 0) return () => undefined;
  // In the order the windows started (a window starting again moves to the end): the run-out ones are first.
  const windows = new Map<string, { startedAt: number; count: number }>();
  return (subject) => {
    const now = Date.now();
    let window = windows.get(subject);
    if (!window || now - window.startedAt >= windowMs) {
      windows.delete(subject);
      for (const [oldest, { startedAt }] of windows) {
        if (now - startedAt < windowMs && windows.size < maxWindows) break;
        windows.delete(oldest);
      }
      window = { startedAt: now, count: 0 };
      windows.set(subject, window);
    }
    window.count += 1;
    return window.count > perMinute ? Math.ceil((window.startedAt + windowMs - now) / 1000) : undefined;
  };
}
