import { stopStandInsAfterAll } from './event-store.js';

// Every test file stops the EventStoreDB stand-ins it started, after its own hooks have closed the services on them.
stopStandInsAfterAll();
