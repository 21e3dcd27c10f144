/**
 * Per-caller fixed-window limit (contract §1: off by default). In memory, so the limit applies per
 * instance; returns the seconds to wait when the caller is over it.
 */
export function createRateLimiter(perMinute: number): (subject: string) => number | undefined {
  if (perMinute <= 0) return () => undefined;
  const windows = new Map<string, { startedAt: number; count: number }>();
  return (subject) => {
    const now = Date.now();
    let window = windows.get(subject);
    if (!window || now - window.startedAt >= 60_000) {
      if (windows.size > 100_000) windows.clear();
      window = { startedAt: now, count: 0 };
      windows.set(subject, window);
    }
    window.count += 1;
    return window.count > perMinute ? Math.ceil((window.startedAt + 60_000 - now) / 1000) : undefined;
  };
}
