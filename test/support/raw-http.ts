import net from 'node:net';

/**
 * Sends bytes as they are, for requests no HTTP client would produce, and reads the answer until
 * the socket closes. `unfinished`: the request is left unfinished, as by a client that stops
 * sending, rather than ended by closing this side of the connection.
 */
export async function rawHttp(listener: { url: string }, request: string | Buffer, { unfinished = false } = {}) {
  const { port } = new URL(listener.url);
  const received = await new Promise<Buffer>((resolve, reject) => {
    const socket = net.connect(Number(port), '127.0.0.1', () => (unfinished ? socket.write(request) : socket.end(request)));
    const chunks: Buffer[] = [];
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('close', () => resolve(Buffer.concat(chunks)));
    socket.on('error', reject);
  });
  const text = received.toString('utf8');
  const [head = '', body = ''] = text.split('\r\n\r\n');
  const [statusLine = '', ...headerLines] = head.split('\r\n');
  const headers = new Headers(headerLines.map((line) => line.split(/:\s*/, 2) as [string, string]));
  return { status: Number(statusLine.split(' ')[1]), headers, body: body ? JSON.parse(body) : undefined, text };
}
