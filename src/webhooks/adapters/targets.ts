import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import type { LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';
import { Agent } from 'undici';

/**
 * Where webhooks may point (contract §15): `https` only, and never a loopback, private,
 * link-local (cloud metadata: 169.254.169.254), multicast, reserved or otherwise non-public
 * address, unless WEBHOOK_ALLOW_PRIVATE_TARGETS. Checked at creation on the URL's form, and at
 * every connection on the addresses its name resolves to then (a name may resolve elsewhere later).
 */

/** Whether an IP address is an ordinary public unicast one (IPv4-mapped IPv6 judged as its IPv4). */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  let parsed = ipaddr.parse(address);
  if (parsed instanceof ipaddr.IPv6 && parsed.isIPv4MappedAddress()) parsed = parsed.toIPv4Address();
  return parsed.range() === 'unicast';
}

const literalAddress = (hostname: string) => hostname.replace(/^\[(.*)\]$/, '$1');

/** What is wrong with a target URL as written, or undefined when it may be used. */
export function targetProblem(url: string, allowPrivate: boolean): string | undefined {
  if (!URL.canParse(url)) return 'must be an absolute URL';
  const parsed = new URL(url);
  if (parsed.username || parsed.password) return 'must not carry credentials';
  if (allowPrivate) return parsed.protocol === 'https:' || parsed.protocol === 'http:' ? undefined : 'must be an https:// URL';
  if (parsed.protocol !== 'https:') return 'must be an https:// URL';
  const host = literalAddress(parsed.hostname);
  if (host === 'localhost' || host.endsWith('.localhost') || (ipaddr.isValid(host) && !isPublicAddress(host))) {
    return 'must not name a loopback, private, link-local or otherwise non-public address';
  }
  return undefined;
}

export class NonPublicTarget extends Error {
  constructor(host: string) {
    super(`${host} resolves to a non-public address`);
    this.name = 'NonPublicTarget';
  }
}

/** A DNS lookup that fails when any address found is not public: the connection is never opened. */
const publicOnlyLookup: LookupFunction = (hostname, options, callback) => {
  dnsLookup(hostname, { ...options, all: true }, (error, addresses: LookupAddress[]) => {
    if (error) return callback(error, '', 0);
    if (addresses.length === 0 || addresses.some((found) => !isPublicAddress(found.address))) {
      return callback(new NonPublicTarget(hostname), '', 0);
    }
    if (options.all) return (callback as unknown as (error: null, addresses: LookupAddress[]) => void)(null, addresses);
    callback(null, addresses[0]!.address, addresses[0]!.family);
  });
};

/** The HTTP agent of deliveries: with the checks on, every connection goes through the public-only lookup. */
export function deliveryAgent(allowPrivate: boolean): Agent {
  return new Agent({ connect: allowPrivate ? {} : { lookup: publicOnlyLookup }, keepAliveTimeout: 10_000 });
}

/** The check a connection's lookup cannot make: a URL naming an address skips DNS. */
export function literalTargetProblem(url: string, allowPrivate: boolean): string | undefined {
  if (allowPrivate) return undefined;
  const host = literalAddress(new URL(url).hostname);
  return ipaddr.isValid(host) && !isPublicAddress(host) ? `${host} is not a public address` : undefined;
}
