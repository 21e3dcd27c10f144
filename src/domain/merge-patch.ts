export type JsonObject = { [key: string]: unknown };

const isObject = (value: unknown): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value);

/** JSON Merge Patch (RFC 7396) of an object onto an object, without mutating either. */
export function mergePatch(target: JsonObject, patch: JsonObject): JsonObject {
  const result: JsonObject = { ...target };
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) {
      delete result[key];
    } else if (isObject(value)) {
      const current = result[key];
      result[key] = mergePatch(isObject(current) ? current : {}, value);
    } else {
      result[key] = value;
    }
  }
  return result;
}
