import type { StreamHead } from '../eventstore/port.js';

/**
 * The state and stream head this instance last left each recently written stream in, so that the next
 * command on it can decide without reading the stream first. It is only a guess: the append still
 * expects that version, so a stream that moved on elsewhere refuses it, and the command reads the
 * stream and decides again.
 *
 * Kept off the V8 heap, as JSON text in one buffer of `maxBytes` written round like a ring: the
 * index holds only where each stream's record starts. Records kept as heap strings and objects
 * lived long enough to be promoted, then died there, and the old space filled with them; the major
 * collections that followed stalled the service for 100–300 ms (`npm run bench`, README). Every
 * reader gets its own copy. When the ring is full the least recently written records go first.
 */
export class RecentStates {
  private readonly arena: Buffer;
  /** Where each stream's latest record starts; older records of it are left to be overwritten. */
  private readonly index = new Map<string, number>();
  private head = 0;
  private tail = 0;
  private records = 0;
  /** Where the records stop before going round to the start again (-1: they do not). */
  private wrapAt = -1;

  constructor(maxBytes = 32 * 1024 * 1024) {
    this.arena = Buffer.allocUnsafeSlow(maxBytes);
  }

  get<State>(streamName: string): { head: StreamHead; state: State } | undefined {
    const at = this.index.get(streamName);
    if (at === undefined) return undefined;
    const nameBytes = this.arena.readUInt16BE(at);
    const jsonStart = at + recordHeaderBytes + nameBytes;
    const json = this.arena.toString('utf8', jsonStart, jsonStart + this.arena.readUInt32BE(at + 2));
    return {
      head: { version: this.arena.readBigUInt64BE(at + 6), hash: this.arena.toString('hex', at + 14, at + recordHeaderBytes) },
      state: JSON.parse(json) as State,
    };
  }

  /** `head.hash`: the hash of the stream's last event (src/integrity/hashes.ts), the next event's `previous_hash`. */
  set(streamName: string, head: StreamHead, state: unknown): void {
    this.forget(streamName);
    const json = JSON.stringify(state);
    const nameBytes = Buffer.byteLength(streamName);
    const size = recordHeaderBytes + nameBytes + Buffer.byteLength(json);
    // A record larger than a fair share of the ring would push out many others; a name with a lone
    // surrogate would not read back as itself from UTF-8, and dropping its record would miss its index.
    if (size > this.arena.length / 8 || nameBytes > 0xffff || !streamName.isWellFormed()) return;
    const at = this.roomFor(size);
    this.arena.writeUInt16BE(nameBytes, at);
    this.arena.writeUInt32BE(size - recordHeaderBytes - nameBytes, at + 2);
    this.arena.writeBigUInt64BE(head.version, at + 6);
    this.arena.write(head.hash, at + 14, 'hex');
    this.arena.write(streamName, at + recordHeaderBytes);
    this.arena.write(json, at + recordHeaderBytes + nameBytes);
    this.head = at + size;
    this.records += 1;
    this.index.set(streamName, at);
  }

  forget(streamName: string): void {
    this.index.delete(streamName);
  }

  /** Where a record of `size` bytes goes: after the newest, going round to the start when the end is near, oldest records dropped to make room. */
  private roomFor(size: number): number {
    for (;;) {
      if (this.records === 0) {
        this.head = 0;
        this.tail = 0;
        this.wrapAt = -1;
      }
      const wentRound = this.records > 0 && this.head <= this.tail;
      if (!wentRound) {
        if (this.arena.length - this.head >= size) return this.head;
        this.wrapAt = this.head;
        this.head = 0;
      } else if (this.tail - this.head >= size) return this.head;
      else this.dropOldest();
    }
  }

  private dropOldest(): void {
    const at = this.tail;
    const nameBytes = this.arena.readUInt16BE(at);
    const name = this.arena.toString('utf8', at + recordHeaderBytes, at + recordHeaderBytes + nameBytes);
    if (this.index.get(name) === at) this.index.delete(name);
    this.tail = at + recordHeaderBytes + nameBytes + this.arena.readUInt32BE(at + 2);
    this.records -= 1;
    if (this.tail === this.wrapAt) {
      this.tail = 0;
      this.wrapAt = -1;
    }
  }
}

/** A record: the stream name's length (16 bits), the JSON text's length (32), the version (64), the last event's hash (256), the name, the text. */
const recordHeaderBytes = 46;
