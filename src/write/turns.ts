/**
 * Resumes waiting commands one per turn of the event loop, in the order they asked (issue 21,
 * fairness). A record's group settles its commands together, and the projection releases their
 * waits together: resumed at once, their answers would run back to back as one stretch of the
 * event loop, and every other request's I/O (another record's read, its query's result) would
 * wait for all of them. One per turn, the I/O that arrived meanwhile is served between them.
 */
export class Turns {
  private readonly waiting: (() => void)[] = [];
  private scheduled = false;

  /** Resolves in a turn of its own, after the commands that asked before it. */
  next(): Promise<void> {
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    // setImmediate, not a microtask: an immediate queued from one runs at the next turn, after the poll for I/O.
    setImmediate(() => {
      this.scheduled = false;
      this.waiting.shift()?.();
      if (this.waiting.length > 0) this.schedule();
    });
  }
}
