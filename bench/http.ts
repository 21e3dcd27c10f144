import http from 'node:http';

/** A service to call: its base URL and the bearer token to call it with. */
export type Target = { url: string; token: string };
export type Answer = { status: number; text: string; ms: number };

/** POST /api over at most `maxSockets` keep-alive connections, each answer timed; `close` ends the connections. */
export function apiClient(maxSockets: number) {
  const agent = new http.Agent({ keepAlive: true, maxSockets });

  const post = (target: Target, query: string, params: unknown, headers: Record<string, string> = {}): Promise<Answer> => {
    const body = JSON.stringify({ query, params });
    const sent = performance.now();
    return new Promise((resolve, reject) => {
      const request = http.request(
        `${target.url}/api`,
        {
          method: 'POST',
          agent,
          headers: {
            'content-type': 'application/json',
            authorization: `Bearer ${target.token}`,
            'content-length': Buffer.byteLength(body),
            ...headers,
          },
        },
        (response) => {
          let text = '';
          response.setEncoding('utf8');
          response.on('data', (chunk: string) => (text += chunk));
          response.on('end', () => resolve({ status: response.statusCode ?? 0, text, ms: performance.now() - sent }));
        },
      );
      request.on('error', reject);
      request.end(body);
    });
  };

  /** `times` requests one after another; their latencies. Throws on an answer other than 200. */
  const sequential = async (times: number, send: (index: number) => Promise<Answer>): Promise<number[]> => {
    const latencies: number[] = [];
    for (let index = 0; index < times; index++) {
      const answer = await send(index);
      if (answer.status !== 200) throw new Error(`answered ${answer.status}: ${answer.text}`);
      latencies.push(answer.ms);
    }
    return latencies;
  };

  return { post, sequential, close: () => agent.destroy() };
}
