import ipaddr from 'ipaddr.js';

/**
 * Where webhooks may point (contract §15): `https` only, and never a loopback, private,
 * link-local (cloud metadata: 169.254.169.254), multicast, reserved or otherwise non-public
 * address, unless WEBHOOK_ALLOW_PRIVATE_TARGETS. Checked at creation on the URL's form, and at
 * every attempt again: the scheme and an address in the URL here, the addresses its name resolves
 * to when connecting (a name may resolve elsewhere later: ./delivery-agent.ts).
 */

/**
 * Whether an IP address is an ordinary public unicast one (IPv4-mapped IPv6 judged as its IPv4).
 * The deprecated IPv4-compatible form (`::a.b.c.d`, `::7f00:1`, RFC 4291 §2.5.5.1) is never
 * public: ipaddr.js calls it unicast, but it only ever stands for an IPv4 address.
 */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  let parsed = ipaddr.parse(address);
  if (parsed instanceof ipaddr.IPv6) {
    if (parsed.isIPv4MappedAddress()) parsed = parsed.toIPv4Address();
    else if (parsed.parts.slice(0, 6).every((part) => part === 0)) return false;
  }
  return parsed.range() === 'unicast';
}

/** The host a URL names, without the brackets of an IPv6 literal or the trailing dot of a fully qualified name (`localhost.`). */
const literalAddress = (hostname: string) => hostname.replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '');

/** What is wrong with a target URL as written, or undefined when it may be used. */
export function targetProblem(url: string, allowPrivate: boolean): string | undefined {
  if (!URL.canParse(url)) return 'must be an absolute URL';
  const parsed = new URL(url);
  // Empty credentials (`https://@host/`, `https://:@host/`) leave the parsed URL none, but the URL is stored as written.
  const authority = /^[a-z][a-z0-9+.-]*:\/\/([^/\\?#]*)/i.exec(url)?.[1] ?? '';
  if (parsed.username || parsed.password || authority.includes('@')) return 'must not carry credentials';
  // The URL parser takes it (`:0`, `:00`), but no connection can be made to it.
  if (parsed.port === '0') return 'must not name port 0';
  if (allowPrivate) {
    if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') return 'must be an https:// or http:// URL';
  } else if (parsed.protocol !== 'https:') return 'must be an https:// URL';
  // The parser finds a host in `https:///path` (path) or `https:example.com`: one the URL, stored
  // as written, does not show as its host.
  if (!/^https?:\/\/[^/\\?#]/i.test(url)) return 'must be written as https://host/…, the host right after the //';
  if (allowPrivate) return undefined;
  const host = literalAddress(parsed.hostname);
  if (host === 'localhost' || host.endsWith('.localhost') || (ipaddr.isValid(host) && !isPublicAddress(host))) {
    return 'must not name a loopback, private, link-local or otherwise non-public address';
  }
  return undefined;
}

/**
 * The checks of each attempt that a connection's lookup cannot make: the scheme (a webhook created
 * while private targets were allowed may be `http://`), and an address in the URL (connecting to
 * it skips DNS). A problem found here fails the attempt before any connection is opened.
 */
export function connectionTargetProblem(url: string, allowPrivate: boolean): string | undefined {
  if (allowPrivate) return undefined;
  const parsed = new URL(url);
  if (parsed.protocol !== 'https:') return `${parsed.protocol}// is refused: targets must be https://`;
  const host = literalAddress(parsed.hostname);
  return ipaddr.isValid(host) && !isPublicAddress(host) ? `${host} is not a public address` : undefined;
}
