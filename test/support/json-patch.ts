/**
 * An RFC 6902 applier for the operations a diff holds (add, remove, replace), written from the
 * RFCs' text apart from the library that makes the patches, so a test of "applying the patch to
 * `from` gives `to`" does not take the library's word for it. Throws on anything the RFC refuses.
 */

type Json = unknown;
type Operation = { op: string; path: string; value?: Json };

const isContainer = (value: Json): value is Record<string, Json> | Json[] => typeof value === 'object' && value !== null;

/** RFC 6901 §4: `~1` then `~0`, in that order. */
const tokensOf = (pointer: string): string[] => {
  if (pointer === '') return [];
  if (!pointer.startsWith('/')) throw new Error(`not a JSON Pointer: ${JSON.stringify(pointer)}`);
  return pointer
    .slice(1)
    .split('/')
    .map((token) => token.replaceAll('~1', '/').replaceAll('~0', '~'));
};

const arrayIndex = (array: Json[], token: string, forAdd: boolean): number => {
  if (forAdd && token === '-') return array.length;
  if (!/^(0|[1-9][0-9]*)$/.test(token)) throw new Error(`not an array index: ${token}`);
  const index = Number(token);
  if (index > array.length || (!forAdd && index === array.length)) throw new Error(`index out of range: ${token}`);
  return index;
};

function applyOne(document: Json, operation: Operation): Json {
  const tokens = tokensOf(operation.path);
  if (tokens.length === 0) {
    if (operation.op === 'remove') return null;
    return structuredClone(operation.value);
  }
  let parent = document;
  for (const token of tokens.slice(0, -1)) {
    if (!isContainer(parent)) throw new Error(`no container at ${operation.path}`);
    parent = Array.isArray(parent) ? parent[arrayIndex(parent, token, false)] : (parent as Record<string, Json>)[token];
  }
  const last = tokens[tokens.length - 1]!;
  if (!isContainer(parent)) throw new Error(`no container for ${operation.path}`);
  if (Array.isArray(parent)) {
    const index = arrayIndex(parent, last, operation.op === 'add');
    if (operation.op === 'add') parent.splice(index, 0, structuredClone(operation.value));
    else if (operation.op === 'remove') parent.splice(index, 1);
    else if (operation.op === 'replace') parent[index] = structuredClone(operation.value);
    else throw new Error(`unexpected op ${operation.op}`);
    return document;
  }
  const object = parent as Record<string, Json>;
  if (operation.op !== 'add' && !Object.hasOwn(object, last)) throw new Error(`nothing to ${operation.op} at ${operation.path}`);
  if (operation.op === 'remove') delete object[last];
  else if (operation.op === 'add' || operation.op === 'replace') object[last] = structuredClone(operation.value);
  else throw new Error(`unexpected op ${operation.op}`);
  return document;
}

/** `from` with `patch` applied, `from` itself untouched. */
export const applyJsonPatch = (from: Json, patch: readonly Operation[]): Json =>
  patch.reduce((document, operation) => applyOne(document, operation), structuredClone(from));
