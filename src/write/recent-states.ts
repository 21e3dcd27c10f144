/**
 * The state and version this instance last left each recently written stream in, so that the next
 * command on it can decide without reading the stream first. It is only a guess: the append still
 * expects that version, so a stream that moved on elsewhere refuses it, and the command reads the
 * stream and decides again. Kept as JSON text, which takes a fraction of the heap the objects would
 * and hands every reader its own copy; bounded by that text's size, the least recently used go first.
 */
export class RecentStates {
  private readonly entries = new Map<string, { version: bigint; json: string }>();
  private bytes = 0;

  constructor(private readonly maxBytes = 16 * 1024 * 1024) {}

  get<State>(streamName: string): { version: bigint; state: State } | undefined {
    const entry = this.entries.get(streamName);
    if (!entry) return undefined;
    // Most recently used last: eviction takes from the front.
    this.entries.delete(streamName);
    this.entries.set(streamName, entry);
    return { version: entry.version, state: JSON.parse(entry.json) as State };
  }

  set(streamName: string, version: bigint, state: unknown): void {
    this.forget(streamName);
    const json = JSON.stringify(state);
    if (json.length > this.maxBytes / 8) return;
    this.entries.set(streamName, { version, json });
    this.bytes += json.length;
    for (const [oldest, entry] of this.entries) {
      if (this.bytes <= this.maxBytes) break;
      this.entries.delete(oldest);
      this.bytes -= entry.json.length;
    }
  }

  forget(streamName: string): void {
    const entry = this.entries.get(streamName);
    if (!entry) return;
    this.entries.delete(streamName);
    this.bytes -= entry.json.length;
  }
}
