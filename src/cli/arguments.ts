import { parseArgs, type ParseArgsConfig } from 'node:util';

type Options = NonNullable<ParseArgsConfig['options']>;
// Named, because declarations cannot name the type parseArgs returns.
type ParsedCommandLine<T extends Options> = ReturnType<
  typeof parseArgs<{ args: string[]; options: T; allowPositionals: boolean; strict: true }>
>;

/** Ends a command-line tool with one line on stderr and exit code 2 (a usage error), never a stack trace. */
export function usageError(tool: string, message: string): never {
  process.stderr.write(`${tool}: ${message} (see --help)\n`);
  process.exit(2);
}

/** Node's parseArgs messages, shortened to what a user needs. */
function shorten(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const unknown = /Unknown option '([^']+)'/.exec(message);
  if (unknown) return `unknown option ${unknown[1]}`;
  const unexpected = /Unexpected argument '([^']+)'/.exec(message);
  if (unexpected) return `unexpected argument ${unexpected[1]}`;
  return message.split('. ')[0]!.replace(/^Option '(-[\w-]+)[^']*' argument missing$/, '$1 needs a value');
}

/**
 * The command line of an operator tool: `--help` (or `-h`) prints `usage` on stdout and exits 0
 * before anything else is read; an unknown option or a malformed one is a usage error.
 */
export function commandLine<T extends Options>(tool: string, usage: string, options: T, allowPositionals = false): ParsedCommandLine<T> {
  const argv = process.argv.slice(2);
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(usage.endsWith('\n') ? usage : `${usage}\n`);
    process.exit(0);
  }
  try {
    return parseArgs({ args: argv, options, allowPositionals, strict: true });
  } catch (error) {
    return usageError(tool, shorten(error));
  }
}
