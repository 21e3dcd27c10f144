import { createRequire } from 'node:module';
import { pino, type Logger } from 'pino';

const base = { service: 'workspace-solution-api' };

/** pino-pretty is a development dependency: present after `npm ci`, absent from the production image. */
function prettyAvailable(): boolean {
  try {
    createRequire(import.meta.url).resolve('pino-pretty');
    return true;
  } catch {
    return false;
  }
}

/**
 * JSON lines, one object per event, for log collectors; on a terminal (a developer running
 * `npm start`), human-readable lines instead, when pino-pretty is installed.
 */
export function createLogger(level: string): Logger {
  if (process.stdout.isTTY && prettyAvailable()) {
    return pino({
      level,
      base,
      transport: { target: 'pino-pretty', options: { translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname,service', singleLine: true } },
    });
  }
  return pino({ level, base, timestamp: pino.stdTimeFunctions.isoTime });
}
