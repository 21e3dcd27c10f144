/**
 * The stand-in as a process of its own, as a real node is: prints its connection string on the
 * first line of stdout and serves until stopped (SIGTERM, SIGINT). Benchmarks run it this way so
 * that the node's work does not share a thread with the load they generate.
 *
 *   node --import tsx test/support/eventstoredb-standin/serve.ts
 */
import { EventStoreDBStandIn } from './index.js';

const standIn = await EventStoreDBStandIn.start();
process.stdout.write(`${standIn.url}\n`);
const stop = () => void standIn.stop().then(() => process.exit(0));
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
