/** A fenced block of a Markdown text: its info string, the 1-based lines of its opening and closing fences, and its text. */
export type Block = { info: string; line: number; endLine: number; text: string };

/** The fenced blocks of a Markdown text, in order. */
export function fencedBlocks(markdown: string): Block[] {
  const blocks: Block[] = [];
  let open: { info: string; line: number; body: string[] } | undefined;
  for (const [index, text] of markdown.split('\n').entries()) {
    const fence = /^```(.*)$/.exec(text);
    if (open === undefined) {
      if (fence) open = { info: fence[1]!.trim(), line: index + 1, body: [] };
    } else if (fence && fence[1]!.trim() === '') {
      blocks.push({ info: open.info, line: open.line, endLine: index + 1, text: open.body.join('\n') });
      open = undefined;
    } else {
      open.body.push(text);
    }
  }
  return blocks;
}
