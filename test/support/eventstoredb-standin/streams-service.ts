/**
 * The Streams gRPC service (streams.proto) over the in-memory log: Read (streams, `$all`,
 * subscriptions to `$all`), Append and BatchAppend. Delete and Tombstone are not implemented:
 * the service never deletes streams.
 */
import { randomUUID } from 'node:crypto';
import type {
  ServerDuplexStream,
  ServerReadableStream,
  ServerWritableStream,
  sendUnaryData,
  UntypedServiceImplementation,
} from '@grpc/grpc-js';
import type { CallKind, Fault, Faults } from './faults.js';
import { compare, startOfLog, type InMemoryLog, type Position, type ProposedEvent, type StoredEvent } from './log.js';
import {
  appendExpectation,
  appendSuccess,
  appendWrongExpectedVersion,
  batchExpectation,
  batchNotReady,
  batchSuccess,
  batchWrongExpectedVersion,
  caughtUp,
  checkpoint,
  confirmation,
  errors,
  type GrpcError,
  readResponse,
  streamName,
  streamNotFound,
  streamsPb,
  toProposedEvent,
} from './messages.js';

type ReadCall = ServerWritableStream<streamsPb.ReadReq, streamsPb.ReadResp>;
type Options = streamsPb.ReadReq.Options;

/** The search window of a filtered read or subscription when the client names none (Grpc/Streams.Read.cs). */
const defaultMaxSearchWindow = 32;

export type StreamsContext = {
  log: InMemoryLog;
  faults: Faults;
  /** Counts of calls by kind, for tests that bound how many round trips an operation makes. */
  calls: Record<CallKind, number>;
  /** Calls left open by a fault or a subscription; the stand-in ends them when it stops or drops subscriptions. */
  open: Set<{ end: (error: GrpcError) => void; subscription: boolean }>;
};

/** Applies a fault that ends the call before it does anything; `true` when the call was handled. */
function failFirst(context: StreamsContext, fault: Fault | undefined, fail: (error: GrpcError) => void): boolean {
  if (!fault) return false;
  switch (fault.kind) {
    case 'unavailable':
      fail(errors.unavailable());
      return true;
    case 'not-leader':
      fail(errors.notLeader(fault.leader.host, fault.leader.port));
      return true;
    case 'unknown':
      fail(errors.unknown(fault.details));
      return true;
    case 'no-answer': {
      const open = { end: fail, subscription: false };
      context.open.add(open);
      return true;
    }
    case 'not-ready':
    case 'lose-answer':
    case 'slow':
      return false;
  }
}

const lacksRequiredMetadata = (event: ProposedEvent) => !event.type || !event.contentType;

const requiresLeader = (call: { metadata: { get: (key: string) => unknown[] } }) => call.metadata.get('requires-leader')[0] === 'true';

function eventFilter(options: Options): ((event: StoredEvent) => boolean) | undefined {
  if (options.getFilterOptionCase() !== streamsPb.ReadReq.Options.FilterOptionCase.FILTER) return undefined;
  const filter = options.getFilter()!;
  const byStream = filter.getFilterCase() === streamsPb.ReadReq.Options.FilterOptions.FilterCase.STREAM_IDENTIFIER;
  const expression = byStream ? filter.getStreamIdentifier()! : filter.getEventType()!;
  const prefixes = expression.getPrefixList();
  const regex = expression.getRegex() ? new RegExp(expression.getRegex()) : undefined;
  return (event) => {
    const subject = byStream ? event.stream : event.type;
    return regex ? regex.test(subject) : prefixes.some((prefix) => subject.startsWith(prefix));
  };
}

function allStartPosition(options: Options): Position | 'start' | 'end' {
  const all = options.getAll()!;
  switch (all.getAllOptionCase()) {
    case streamsPb.ReadReq.Options.AllOptions.AllOptionCase.POSITION: {
      const position = all.getPosition()!;
      return { commit: BigInt(position.getCommitPosition()), prepare: BigInt(position.getPreparePosition()) };
    }
    case streamsPb.ReadReq.Options.AllOptions.AllOptionCase.END:
      return 'end';
    default:
      return 'start';
  }
}

function readStream(context: StreamsContext, call: ReadCall, options: Options): void {
  const stream = options.getStream()!;
  const name = streamName(stream.getStreamIdentifier());
  const events = context.log.stream(name);
  if (!events) {
    // A missing stream is a message, not an error status (Streams.Read.cs, `StreamNotFound` case).
    call.write(streamNotFound(name));
    call.end();
    return;
  }
  const count = BigInt(options.getCount());
  const forwards = options.getReadDirection() === streamsPb.ReadReq.Options.ReadDirection.FORWARDS;
  const cases = streamsPb.ReadReq.Options.StreamOptions.RevisionOptionCase;
  const last = BigInt(events.length - 1);
  let from =
    stream.getRevisionOptionCase() === cases.REVISION
      ? BigInt(stream.getRevision())
      : stream.getRevisionOptionCase() === cases.END
        ? last
        : 0n;
  if (!forwards && stream.getRevisionOptionCase() === cases.START) from = 0n;
  let sent = 0n;
  for (let revision = from; sent < count && revision >= 0n && revision <= last; revision += forwards ? 1n : -1n) {
    call.write(readResponse(events[Number(revision)]!));
    sent += 1n;
  }
  call.end();
}

function readAll(context: StreamsContext, call: ReadCall, options: Options): void {
  const start = allStartPosition(options);
  if (typeof start === 'object' && !context.log.isValidPosition(start)) {
    call.emit('error', errors.invalidReadPosition());
    return;
  }
  const count = BigInt(options.getCount());
  const filter = eventFilter(options);
  const forwards = options.getReadDirection() === streamsPb.ReadReq.Options.ReadDirection.FORWARDS;
  const from = start === 'start' ? startOfLog : start === 'end' ? context.log.end : start;
  const events = forwards ? context.log.readAllForwards(from) : context.log.readAllBackwards(from);
  let sent = 0n;
  for (const event of events) {
    if (sent >= count) break;
    if (filter && !filter(event)) continue;
    call.write(readResponse(event));
    sent += 1n;
  }
  call.end();
}

/**
 * A catch-up subscription to `$all` (Enumerators/Enumerator.AllSubscription.cs and
 * Enumerator.AllSubscriptionFiltered.cs): a confirmation, every event after the start position
 * (exclusive), `caught_up` (from server 23.10), then live events as they are written. A filtered
 * subscription also sends a checkpoint each time `window × multiplier` events have been
 * considered, matching or not, at the position of the last one, and always one just before
 * `caught_up`, so a client can store progress through stretches of events it does not want.
 */
function subscribeToAll(context: StreamsContext, call: ReadCall, options: Options): void {
  const start = allStartPosition(options);
  if (typeof start === 'object' && !context.log.isValidPosition(start)) {
    call.emit('error', errors.invalidSubscriptionPosition());
    return;
  }
  const filter = eventFilter(options);
  const filterOptions = options.getFilter();
  const window =
    filterOptions?.getWindowCase() === streamsPb.ReadReq.Options.FilterOptions.WindowCase.MAX
      ? filterOptions.getMax()
      : defaultMaxSearchWindow;
  const checkpointEvery = filter ? window * filterOptions!.getCheckpointintervalmultiplier() : 0;
  let after: Position = start === 'start' ? startOfLog : start === 'end' ? context.log.end : start;
  let considered = 0;
  let ended = false;

  const pump = () => {
    if (ended) return;
    for (const event of context.log.readAllForwards(after)) {
      if (compare(event.position, after) <= 0) continue;
      after = event.position;
      if (!filter || filter(event)) call.write(readResponse(event));
      considered += 1;
      if (checkpointEvery && considered % checkpointEvery === 0) call.write(checkpoint(event.position));
    }
  };
  const open = {
    subscription: true,
    end: (error: GrpcError) => {
      finish();
      call.emit('error', error);
    },
  };
  const finish = () => {
    ended = true;
    stopListening();
    context.open.delete(open);
  };
  const stopListening = context.log.onWrite(pump);
  context.open.add(open);
  call.on('cancelled', finish);
  call.on('error', finish);

  call.write(confirmation(randomUUID()));
  pump();
  if (filter) call.write(checkpoint(after));
  call.write(caughtUp());
}

export function streamsService(context: StreamsContext): UntypedServiceImplementation {
  return {
    read(call: ReadCall) {
      const options = call.request.getOptions()!;
      const isAll = options.getStreamOptionCase() === streamsPb.ReadReq.Options.StreamOptionCase.ALL;
      const subscription = options.getCountOptionCase() === streamsPb.ReadReq.Options.CountOptionCase.SUBSCRIPTION;
      const kind: CallKind = !isAll ? 'read-stream' : subscription ? 'subscribe' : 'read-all';
      context.calls[kind] += 1;
      const fault = context.faults.take(kind, requiresLeader(call));
      if (failFirst(context, fault, (error) => call.emit('error', error))) return;
      const serve = () => {
        if (!isAll) {
          if (subscription) return void call.emit('error', errors.unimplemented('subscribing to a stream'));
          return readStream(context, call, options);
        }
        return subscription ? subscribeToAll(context, call, options) : readAll(context, call, options);
      };
      if (fault?.kind === 'slow') setTimeout(serve, fault.ms);
      else serve();
    },

    /** The pre-21.10 append: options, then proposed messages, on one client stream (Streams.Append.cs). */
    append(call: ServerReadableStream<streamsPb.AppendReq, streamsPb.AppendResp>, callback: sendUnaryData<streamsPb.AppendResp>) {
      context.calls.append += 1;
      const fault = context.faults.take('append', true);
      if (failFirst(context, fault, (error) => callback(error))) return;
      // The pre-batch append answers a node that is not ready with an error status (RpcExceptions.ServerNotReady).
      if (fault?.kind === 'not-ready') return callback(errors.unavailable());
      let options: streamsPb.AppendReq.Options | undefined;
      const events: ProposedEvent[] = [];
      call.on('data', (request: streamsPb.AppendReq) => {
        if (request.hasOptions()) options = request.getOptions();
        else events.push(toProposedEvent(request.getProposedMessage()!));
      });
      call.on('end', () => {
        if (events.some(lacksRequiredMetadata)) return callback(errors.missingMetadata());
        const expected = appendExpectation(options!);
        const outcome = context.log.append(streamName(options!.getStreamIdentifier()), expected, events);
        if (fault?.kind === 'lose-answer') return callback(errors.unavailable());
        callback(
          null,
          outcome.kind === 'written'
            ? appendSuccess(outcome.currentRevision, outcome.position)
            : appendWrongExpectedVersion(expected, outcome.currentRevision),
        );
      });
    },

    /**
     * The batched append of servers from 21.10: one bidirectional stream carries many writes, each
     * a series of requests under one correlation id whose first request holds the options and whose
     * last says `is_final`; each write gets one response with the same correlation id
     * (Streams.BatchAppend.cs).
     */
    batchAppend(call: ServerDuplexStream<streamsPb.BatchAppendReq, streamsPb.BatchAppendResp>) {
      const pending = new Map<string, { options: streamsPb.BatchAppendReq.Options; events: ProposedEvent[] }>();
      call.on('data', (request: streamsPb.BatchAppendReq) => {
        const correlationId = request.getCorrelationId();
        const key = correlationId?.getString() ?? '';
        const write = pending.get(key) ?? { options: request.getOptions()!, events: [] };
        pending.set(key, write);
        write.events.push(...request.getProposedMessagesList().map(toProposedEvent));
        if (!request.getIsFinal()) return;
        pending.delete(key);
        context.calls.append += 1;
        const fault = context.faults.take('append', true);
        // A fault fails the whole stream, as a dropped connection does; the client fails every write on it.
        if (failFirst(context, fault, (error) => call.emit('error', error))) return;
        const name = streamName(write.options.getStreamIdentifier());
        if (fault?.kind === 'not-ready') return void call.write(batchNotReady(correlationId, name));
        if (write.events.some(lacksRequiredMetadata)) return void call.emit('error', errors.missingMetadata());
        const expected = batchExpectation(write.options);
        const outcome = context.log.append(name, expected, write.events);
        if (fault?.kind === 'lose-answer') return void call.emit('error', errors.unavailable());
        call.write(
          outcome.kind === 'written'
            ? batchSuccess(correlationId, name, outcome.currentRevision, outcome.position)
            : batchWrongExpectedVersion(correlationId, name, expected, outcome.currentRevision),
        );
      });
      call.on('end', () => call.end());
    },

    delete(_call: unknown, callback: sendUnaryData<never>) {
      callback(errors.unimplemented('deleting a stream'));
    },
    tombstone(_call: unknown, callback: sendUnaryData<never>) {
      callback(errors.unimplemented('tombstoning a stream'));
    },
  };
}
