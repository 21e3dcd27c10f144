import { describe, expect, it } from 'vitest';
import { connectionTargetProblem, isPublicAddress, targetProblem } from '../../../src/webhooks/adapters/targets.js';

describe('webhook targets', () => {
  it('tells public unicast addresses from loopback, private, link-local (cloud metadata), reserved and mapped ones', () => {
    for (const address of ['93.184.216.34', '8.8.8.8', '2606:4700:4700::1111']) expect(isPublicAddress(address), address).toBe(true);
    for (const address of [
      '127.0.0.1',
      '10.1.2.3',
      '172.16.0.1',
      '192.168.1.1',
      '169.254.169.254',
      '0.0.0.0',
      '100.64.0.1',
      '224.0.0.1',
      '::1',
      'fe80::1',
      'fd00::1',
      '::ffff:127.0.0.1',
      '::ffff:169.254.169.254',
      // IPv4-compatible (deprecated): ipaddr.js calls these unicast.
      '::7f00:1',
      '::a9fe:a9fe',
      '::808:808',
      'not an address',
    ]) {
      expect(isPublicAddress(address), address).toBe(false);
    }
  });

  it('refuses, as written, anything but https to a name or a public address', () => {
    expect(targetProblem('https://hooks.example.com/in', false)).toBeUndefined();
    expect(targetProblem('https://93.184.216.34/in', false)).toBeUndefined();
    expect(targetProblem('http://hooks.example.com/in', false)).toBe('must be an https:// URL');
    expect(targetProblem('ftp://hooks.example.com/in', true)).toBe('must be an https:// or http:// URL');
    expect(targetProblem('hooks.example.com', false)).toBe('must be an absolute URL');
    // The parser reads a host into these (`path`, `example.com`) that the text does not show as one.
    for (const url of ['https:///path', 'https:hooks.example.com/in', 'https:\\\\hooks.example.com/in', ' https://hooks.example.com/in']) {
      expect(targetProblem(url, false), url).toBe('must be written as https://host/…, the host right after the //');
    }
    expect(targetProblem('HTTPS://Hooks.Example.com/in', false)).toBeUndefined();
    expect(targetProblem('https://user:pw@hooks.example.com/', false)).toBe('must not carry credentials');
    expect(targetProblem('https://@hooks.example.com/', false)).toBe('must not carry credentials');
    expect(targetProblem('https://:@hooks.example.com/', true)).toBe('must not carry credentials');
    expect(targetProblem('https://hooks.example.com/path@where', false)).toBeUndefined();
    for (const url of [
      'https://localhost/',
      'https://api.localhost/',
      'https://127.0.0.1:9464/metrics',
      'https://169.254.169.254/',
      'https://[::1]/',
      'https://[::127.0.0.1]/',
      'https://[::a9fe:a9fe]/latest/meta-data',
      'https://localhost./',
      'https://api.localhost./',
      'https://127.0.0.1./',
    ]) {
      expect(targetProblem(url, false), url).toMatch(/non-public/);
    }
    // Development and tests: http and loopback allowed.
    expect(targetProblem('http://127.0.0.1:9464/', true)).toBeUndefined();
    // Port 0 is no port to connect to, whatever the setting.
    for (const allowPrivate of [false, true]) {
      expect(targetProblem('https://8.8.8.8:0/', allowPrivate)).toBe('must not name port 0');
      expect(targetProblem('https://hooks.example.com:00/in', allowPrivate)).toBe('must not name port 0');
    }
    expect(targetProblem('https://hooks.example.com:65535/in', false)).toBeUndefined();
  });

  it('checks the scheme and an address in the URL at each attempt too, since connecting to an address skips the DNS check', () => {
    expect(connectionTargetProblem('https://10.0.0.1/', false)).toMatch(/not a public address/);
    expect(connectionTargetProblem('https://[fd00::1]/', false)).toMatch(/not a public address/);
    expect(connectionTargetProblem('https://[::169.254.169.254]/', false)).toMatch(/not a public address/);
    expect(connectionTargetProblem('https://hooks.example.com/', false)).toBeUndefined();
    expect(connectionTargetProblem('https://10.0.0.1/', true)).toBeUndefined();
    // A webhook created while WEBHOOK_ALLOW_PRIVATE_TARGETS was on, the setting off since.
    expect(connectionTargetProblem('http://8.8.8.8:4111/x', false)).toBe('http:// is refused: targets must be https://');
    expect(connectionTargetProblem('http://hooks.example.com/', false)).toBe('http:// is refused: targets must be https://');
    expect(connectionTargetProblem('http://127.0.0.1:4111/', true)).toBeUndefined();
  });
});
