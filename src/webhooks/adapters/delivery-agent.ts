import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import type { LookupFunction } from 'node:net';
import { Agent } from 'undici';
import { isPublicAddress } from './targets.js';

/**
 * The delivery thread's HTTP agent, apart from ./targets.ts: the service's main thread checks
 * targets as written, and should not load undici for that (a sixth of a second of every start).
 */

/**
 * One message whether the name has no address, cannot be resolved, or resolves to a non-public
 * one: a delivery's `last_error` must not tell a webhook's manager which names resolve inside the
 * service's network.
 */
class NoPublicAddress extends Error {
  constructor(host: string) {
    super(`no public address was found for ${host}`);
    this.name = 'NoPublicAddress';
  }
}

/** A DNS lookup that fails when any address found is not public: the connection is never opened. */
const publicOnlyLookup: LookupFunction = (hostname, options, callback) => {
  dnsLookup(hostname, { ...options, all: true }, (error, addresses: LookupAddress[]) => {
    if (error || addresses.length === 0 || addresses.some((found) => !isPublicAddress(found.address))) {
      return callback(new NoPublicAddress(hostname), '', 0);
    }
    if (options.all) return (callback as unknown as (error: null, addresses: LookupAddress[]) => void)(null, addresses);
    callback(null, addresses[0]!.address, addresses[0]!.family);
  });
};

/** The HTTP agent of deliveries: with the checks on, every connection goes through the public-only lookup. */
export function deliveryAgent(allowPrivate: boolean): Agent {
  return new Agent({ connect: allowPrivate ? {} : { lookup: publicOnlyLookup }, keepAliveTimeout: 10_000 });
}
