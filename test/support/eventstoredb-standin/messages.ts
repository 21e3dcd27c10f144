/**
 * Conversions between the gRPC messages that `@eventstore/db-client` ships (its generated
 * `*_pb.js`, the same classes the client serialises with) and the stand-in's log, plus the
 * errors KurrentDB answers with (RpcExceptions.cs).
 */
import { Metadata, status, type StatusObject } from '@grpc/grpc-js';
import anyPb from 'google-protobuf/google/protobuf/any_pb.js';
import emptyPb from 'google-protobuf/google/protobuf/empty_pb.js';
import sharedPb from '@eventstore/db-client/generated/shared_pb.js';
import statusPb from '@eventstore/db-client/generated/status_pb.js';
import streamsPb from '@eventstore/db-client/generated/streams_pb.js';
import type { ExpectedRevision, Position, ProposedEvent, StoredEvent } from './log.js';

export { sharedPb, streamsPb };

type ProposedMessage = streamsPb.AppendReq.ProposedMessage | streamsPb.BatchAppendReq.ProposedMessage;

export const streamName = (identifier: sharedPb.StreamIdentifier | undefined) =>
  Buffer.from(identifier?.getStreamName_asU8() ?? new Uint8Array()).toString('utf8');

const streamIdentifier = (name: string) => new sharedPb.StreamIdentifier().setStreamName(Buffer.from(name, 'utf8'));

const uuidOf = (uuid: sharedPb.UUID | undefined): string => {
  if (!uuid) throw new Error('a proposed message without an id');
  if (uuid.hasString()) return uuid.getString().toLowerCase();
  // The structured form: two signed 64-bit halves (shared.proto, UUID.Structured).
  const structured = uuid.getStructured()!;
  const hex = (bits: string) => BigInt.asUintN(64, BigInt(bits)).toString(16).padStart(16, '0');
  const all = hex(structured.getMostSignificantBits()) + hex(structured.getLeastSignificantBits());
  return `${all.slice(0, 8)}-${all.slice(8, 12)}-${all.slice(12, 16)}-${all.slice(16, 20)}-${all.slice(20)}`;
};

/**
 * A proposed message as the server reads it: the "type" and "content-type" metadata entries are
 * required, the rest of the map is ignored (Streams.Append.cs, `Constants.Metadata.Type` and
 * `Constants.Metadata.ContentType`).
 */
export function toProposedEvent(message: ProposedMessage): ProposedEvent {
  const metadata = message.getMetadataMap();
  return {
    id: uuidOf(message.getId()),
    type: metadata.get('type') ?? '',
    contentType: metadata.get('content-type') ?? '',
    data: message.getData_asU8(),
    customMetadata: message.getCustomMetadata_asU8(),
  };
}

/**
 * The expected-revision oneof, which AppendReq.Options and BatchAppendReq.Options number alike
 * (streams.proto: 2 a revision, 3 no stream, 4 any, 5 stream exists).
 */
function expectation(oneofCase: number, revision: () => string): ExpectedRevision {
  switch (oneofCase) {
    case 2:
      return { kind: 'revision', revision: BigInt(revision()) };
    case 3:
      return { kind: 'no_stream' };
    case 5:
      return { kind: 'stream_exists' };
    default:
      return { kind: 'any' };
  }
}

export const appendExpectation = (options: streamsPb.AppendReq.Options) =>
  expectation(options.getExpectedStreamRevisionCase(), () => options.getRevision());

export const batchExpectation = (options: streamsPb.BatchAppendReq.Options) =>
  expectation(options.getExpectedStreamPositionCase(), () => options.getStreamPosition());

/**
 * A ReadResp whose bytes are already known: the generated service serialises a response with
 * `serializeBinary()` (streams_grpc_pb.js), so it sends exactly these bytes.
 */
class SerializedReadResp extends streamsPb.ReadResp {
  constructor(private readonly bytes: Uint8Array) {
    super();
  }

  override serializeBinary(): Uint8Array {
    return this.bytes;
  }
}

/** A stored event never changes, so its response is built and serialised once, on its first read. */
const readResponses = new WeakMap<StoredEvent, SerializedReadResp>();

/**
 * One event as reads and subscriptions send it (Streams.Read.cs, ConvertToReadEvent). Stream
 * reads and `$all` reads alike carry the event's `$all` position (from server 22.6 on).
 */
export function readResponse(event: StoredEvent): streamsPb.ReadResp {
  const cached = readResponses.get(event);
  if (cached) return cached;
  const recorded = new streamsPb.ReadResp.ReadEvent.RecordedEvent()
    .setId(new sharedPb.UUID().setString(event.id))
    .setStreamIdentifier(streamIdentifier(event.stream))
    .setStreamRevision(event.revision.toString())
    .setPreparePosition(event.position.prepare.toString())
    .setCommitPosition(event.position.commit.toString())
    .setCustomMetadata(event.customMetadata)
    .setData(event.data);
  recorded.getMetadataMap().set('type', event.type).set('content-type', event.contentType).set('created', event.created.toString());
  const read = new streamsPb.ReadResp.ReadEvent().setEvent(recorded).setCommitPosition(event.position.commit.toString());
  const response = new SerializedReadResp(new streamsPb.ReadResp().setEvent(read).serializeBinary());
  readResponses.set(event, response);
  return response;
}

export const streamNotFound = (name: string) =>
  new streamsPb.ReadResp().setStreamNotFound(new streamsPb.ReadResp.StreamNotFound().setStreamIdentifier(streamIdentifier(name)));

export const confirmation = (subscriptionId: string) =>
  new streamsPb.ReadResp().setConfirmation(new streamsPb.ReadResp.SubscriptionConfirmation().setSubscriptionId(subscriptionId));

export const checkpoint = (position: Position) =>
  new streamsPb.ReadResp().setCheckpoint(
    new streamsPb.ReadResp.Checkpoint().setCommitPosition(position.commit.toString()).setPreparePosition(position.prepare.toString()),
  );

export const caughtUp = () => new streamsPb.ReadResp().setCaughtUp(new streamsPb.ReadResp.CaughtUp());

export function appendSuccess(currentRevision: bigint, position: Position): streamsPb.AppendResp {
  const success = new streamsPb.AppendResp.Success()
    .setCurrentRevision(currentRevision.toString())
    .setPosition(
      new streamsPb.AppendResp.Position().setCommitPosition(position.commit.toString()).setPreparePosition(position.prepare.toString()),
    );
  return new streamsPb.AppendResp().setSuccess(success);
}

/** Both the 20.6 fields and the current ones are filled, as Streams.Append.cs does. */
export function appendWrongExpectedVersion(expected: ExpectedRevision, current: bigint | undefined): streamsPb.AppendResp {
  const wrong = new streamsPb.AppendResp.WrongExpectedVersion();
  if (current === undefined) wrong.setNoStream2060(new sharedPb.Empty()).setCurrentNoStream(new sharedPb.Empty());
  else wrong.setCurrentRevision2060(Number(current)).setCurrentRevision(current.toString());
  switch (expected.kind) {
    case 'revision':
      wrong.setExpectedRevision2060(Number(expected.revision)).setExpectedRevision(expected.revision.toString());
      break;
    case 'any':
      wrong.setAny2060(new sharedPb.Empty()).setExpectedAny(new sharedPb.Empty());
      break;
    case 'stream_exists':
      wrong.setStreamExists2060(new sharedPb.Empty()).setExpectedStreamExists(new sharedPb.Empty());
      break;
    case 'no_stream':
      wrong.setExpectedNoStream(new sharedPb.Empty());
      break;
  }
  return new streamsPb.AppendResp().setWrongExpectedVersion(wrong);
}

function batchResponse(correlationId: sharedPb.UUID | undefined, stream: string): streamsPb.BatchAppendResp {
  const response = new streamsPb.BatchAppendResp().setStreamIdentifier(streamIdentifier(stream));
  if (correlationId) response.setCorrelationId(correlationId);
  return response;
}

export function batchSuccess(correlationId: sharedPb.UUID | undefined, stream: string, currentRevision: bigint, position: Position) {
  const success = new streamsPb.BatchAppendResp.Success()
    .setCurrentRevision(currentRevision.toString())
    .setPosition(
      new sharedPb.AllStreamPosition().setCommitPosition(position.commit.toString()).setPreparePosition(position.prepare.toString()),
    );
  return batchResponse(correlationId, stream).setSuccess(success);
}

/**
 * A refused batch write: a google.rpc.Status ALREADY_EXISTS, "WrongExpectedVersion", whose details
 * pack an `event_store.client.WrongExpectedVersion` (Grpc/Streams.BatchAppend.cs, Grpc/Status.cs,
 * Grpc/WrongExpectedVersion.cs). The call itself goes on.
 */
export function batchWrongExpectedVersion(
  correlationId: sharedPb.UUID | undefined,
  stream: string,
  expected: ExpectedRevision,
  current: bigint | undefined,
) {
  const details = new sharedPb.WrongExpectedVersion();
  if (current === undefined) details.setCurrentNoStream(new emptyPb.Empty());
  else details.setCurrentStreamRevision(current.toString());
  switch (expected.kind) {
    case 'revision':
      details.setExpectedStreamPosition(expected.revision.toString());
      break;
    case 'any':
      details.setExpectedAny(new emptyPb.Empty());
      break;
    case 'stream_exists':
      details.setExpectedStreamExists(new emptyPb.Empty());
      break;
    case 'no_stream':
      details.setExpectedNoStream(new emptyPb.Empty());
      break;
  }
  const packed = new anyPb.Any();
  packed.pack(details.serializeBinary(), 'event_store.client.WrongExpectedVersion');
  const error = new statusPb.Status().setCode(6).setMessage('WrongExpectedVersion').setDetails(packed);
  return batchResponse(correlationId, stream).setError(error);
}

/**
 * A batch the node is not ready for: a google.rpc.Status with no code and an empty `Any` as its
 * details, "Server Is Not Ready" (Grpc/Streams.BatchAppend.cs, the NotReady case).
 */
export function batchNotReady(correlationId: sharedPb.UUID | undefined, stream: string) {
  const packed = new anyPb.Any();
  packed.pack(new emptyPb.Empty().serializeBinary(), 'google.protobuf.Empty');
  return batchResponse(correlationId, stream).setError(new statusPb.Status().setMessage('Server Is Not Ready').setDetails(packed));
}

export type GrpcError = Partial<StatusObject> & { code: status };

function withMetadata(code: status, details: string, entries: Record<string, string>): GrpcError {
  const metadata = new Metadata();
  for (const [key, value] of Object.entries(entries)) metadata.set(key, value);
  return { code, details, metadata };
}

/** RpcExceptions.cs: the errors the stand-in answers with, each as KurrentDB signals it. */
export const errors = {
  /** `LeaderInfo`: NOT_FOUND with the leader's endpoint in the trailers; the client reconnects there. */
  notLeader: (host: string, port: number) =>
    withMetadata(status.NOT_FOUND, 'Leader info available', {
      exception: 'not-leader',
      'leader-endpoint-host': host,
      'leader-endpoint-port': String(port),
    }),
  /** `ServerNotReady`: UNAVAILABLE. */
  unavailable: () => withMetadata(status.UNAVAILABLE, 'Server Is Not Ready', {}),
  /** UNKNOWN: `NoLeaderInfo`, and `UnknownError` for results a call does not expect. */
  unknown: (details: string) => withMetadata(status.UNKNOWN, details, {}),
  /**
   * A read of `$all` from a position that is not a record's: the enumerator's default branch,
   * `RpcExceptions.UnknownError` (Enumerators/Enumerator.ReadAllForwards.cs).
   */
  invalidReadPosition: () => withMetadata(status.UNKNOWN, 'Unexpected ReadAllResult: InvalidPosition', {}),
  /** The same for a subscription (Grpc/Streams.Read.cs: "Trying to read from an invalid position."). */
  invalidSubscriptionPosition: () => withMetadata(status.INVALID_ARGUMENT, 'Trying to read from an invalid position.', {}),
  /** Proposed events must name their type and content type (Grpc/MetadataHelpers.cs; RpcExceptions.RequiredMetadataPropertyMissing). */
  missingMetadata: () =>
    withMetadata(status.INVALID_ARGUMENT, "Required Metadata Property 'type' is missing", {
      exception: 'missing-required-metadata-property',
      'required-metadata-properties': 'type,content-type',
    }),
  unimplemented: (what: string) => withMetadata(status.UNIMPLEMENTED, `${what} is not implemented by the stand-in`, {}),
};
