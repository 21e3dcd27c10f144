/**
 * A wire-level stand-in for a single EventStoreDB/KurrentDB node, for tests on machines where no
 * real server can run. It is a real gRPC server that the unmodified `@eventstore/db-client`
 * reaches with an ordinary `esdb://127.0.0.1:PORT?tls=false` connection string, serving the
 * client's own generated service definitions. It keeps events in memory and implements only the
 * calls the adapter and the client's handshake make; see test/support/eventstoredb-standin/README.md
 * for what it proves and what only a real server can.
 */
import { Server, ServerCredentials, status, type sendUnaryData, type ServerUnaryCall } from '@grpc/grpc-js';
import serverFeaturesGrpc from '@eventstore/db-client/generated/serverfeatures_grpc_pb.js';
import serverFeaturesPb from '@eventstore/db-client/generated/serverfeatures_pb.js';
import streamsGrpc from '@eventstore/db-client/generated/streams_grpc_pb.js';
import { Faults, type CallKind } from './faults.js';
import { InMemoryLog } from './log.js';
import { streamsService, type StreamsContext } from './streams-service.js';

export type { CallKind, Fault } from './faults.js';

/** The version the stand-in reports; the behaviours it imitates are those of servers from 23.10 on. */
const serverVersion = '24.10.0';

/**
 * The methods a node lists, with the features ServerFeatures.cs attaches: "position" and "events"
 * on reads, "deadline_duration" on BatchAppend. Only what the stand-in implements is listed.
 */
function supportedMethods(batchAppend: boolean): serverFeaturesPb.SupportedMethods {
  const method = (service: string, name: string, features: string[] = []) =>
    new serverFeaturesPb.SupportedMethod().setServiceName(service).setMethodName(name).setFeaturesList(features);
  const streams = 'event_store.client.streams.streams';
  return new serverFeaturesPb.SupportedMethods()
    .setEventStoreServerVersion(serverVersion)
    .setMethodsList([
      method(streams, 'read', ['position', 'events']),
      method(streams, 'append'),
      ...(batchAppend ? [method(streams, 'batchappend', ['deadline_duration'])] : []),
      method('event_store.client.server_features.serverfeatures', 'getsupportedmethods'),
    ]);
}

export type StandInOptions = {
  /** Listen on this port (to restart on the same address); a free one by default. */
  port?: number;
  /** Whether the node offers BatchAppend (servers from 21.10 do); without it the client appends with Append. */
  batchAppend?: boolean;
};

export class EventStoreDBStandIn {
  readonly log = new InMemoryLog();
  readonly faults = new Faults();
  readonly calls: Record<CallKind, number> = { 'server-features': 0, append: 0, 'read-stream': 0, 'read-all': 0, subscribe: 0 };
  private readonly open: StreamsContext['open'] = new Set();
  private server: Server | undefined;
  private boundPort = 0;

  private constructor(private readonly options: StandInOptions) {}

  static async start(options: StandInOptions = {}): Promise<EventStoreDBStandIn> {
    const standIn = new EventStoreDBStandIn(options);
    await standIn.listen(options.port ?? 0);
    return standIn;
  }

  get port(): number {
    return this.boundPort;
  }

  get url(): string {
    return `esdb://127.0.0.1:${this.boundPort}?tls=false`;
  }

  /** Subscriptions open now. */
  get subscriptions(): number {
    return [...this.open].filter((open) => open.subscription).length;
  }

  /** Ends every subscription as a node going away does: UNAVAILABLE, after the events already sent. */
  dropSubscriptions(): void {
    for (const open of [...this.open]) if (open.subscription) open.end({ code: status.UNAVAILABLE, details: 'Server Is Shutting Down' });
  }

  /** Stops listening and drops every connection: from now on connections are refused. The log is kept. */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    for (const open of [...this.open]) open.end({ code: status.UNAVAILABLE, details: 'Server Is Shutting Down' });
    this.open.clear();
    server.forceShutdown();
  }

  /** Listens again on the same port, with the same log: a node restarted. */
  async restart(): Promise<void> {
    await this.stop();
    await this.listen(this.boundPort);
  }

  private async listen(port: number): Promise<void> {
    const server = new Server();
    const context: StreamsContext = { log: this.log, faults: this.faults, calls: this.calls, open: this.open };
    server.addService(streamsGrpc.StreamsService, streamsService(context));
    server.addService(serverFeaturesGrpc.ServerFeaturesService, {
      getSupportedMethods: (_call: ServerUnaryCall<unknown, unknown>, callback: sendUnaryData<serverFeaturesPb.SupportedMethods>) => {
        this.calls['server-features'] += 1;
        callback(null, supportedMethods(this.options.batchAppend ?? true));
      },
    });
    this.boundPort = await new Promise<number>((resolve, reject) =>
      server.bindAsync(`127.0.0.1:${port}`, ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
    );
    this.server = server;
  }
}
