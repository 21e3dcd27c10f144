/* global process, fetch, Headers -- run by Node (see the curl script beside it) */
// The few curl options the documents' examples use, over Node's fetch, for a machine without curl:
// -s, -S, -H 'Name: value', -d body (a POST), -X method, -w text (its \n a newline), and the URL.
// Anything else is refused, so an example that needs more fails here instead of passing unseen.
const args = process.argv.slice(2);
const headers = new Headers();
let url;
let body;
let method;
let writeOut = '';
for (let index = 0; index < args.length; index += 1) {
  const arg = args[index];
  const value = () => args[(index += 1)] ?? '';
  if (arg === '-H') {
    const header = value();
    const colon = header.indexOf(':');
    headers.set(header.slice(0, colon).trim(), header.slice(colon + 1).trim());
  } else if (arg === '-d') body = value();
  else if (arg === '-X') method = value();
  else if (arg === '-w') writeOut = value().replaceAll('\\n', '\n');
  else if (/^-[sS]+$/.test(arg)) continue;
  else if (arg.startsWith('-')) {
    process.stderr.write(`curl stand-in: ${arg} is not supported\n`);
    process.exit(2);
  } else url = arg;
}
// As curl does: a body makes a POST, and is sent as a form unless a Content-Type says otherwise.
if (body !== undefined && !headers.has('content-type')) headers.set('content-type', 'application/x-www-form-urlencoded');
try {
  const response = await fetch(url, { method: method ?? (body === undefined ? 'GET' : 'POST'), headers, body });
  process.stdout.write(`${await response.text()}${writeOut}`);
} catch (error) {
  process.stderr.write(`curl stand-in: ${url}: ${error.cause?.message ?? error.message}\n`);
  process.exit(7);
}
