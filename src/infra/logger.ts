import { createRequire } from 'node:module';
import { pino, type DestinationStream, type Logger } from 'pino';
import { activeTraceFields } from '../observability/tracing.js';

const base = { service: 'workspace-solution-api' };
/** Every line written while a traced request runs names its trace and span (empty when tracing is off). */
const mixin = activeTraceFields;

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
export function createLogger(level: string, destination?: DestinationStream): Logger {
  if (!destination && process.stdout.isTTY && prettyAvailable()) {
    return pino({
      level,
      base,
      mixin,
      transport: { target: 'pino-pretty', options: { translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname,service', singleLine: true } },
    });
  }
  return pino({ level, base, mixin, timestamp: pino.stdTimeFunctions.isoTime }, destination);
}
