// The cache key of a request's grammar, computed on the HTTP thread before the request goes to
// its model's worker: the worker's decode loop then never walks a client's schema to find its
// grammar in the cache, and a schema over the size limit is refused without reaching it.
import { canonicalJsonWithin, SchemaLimitError } from "../structured/index.ts";
import { EngineRequestError, type GenerateRequest } from "./types.ts";

/**
 * Canonical text of everything that decides the request's grammar (response format, tools, tool
 * choice, parallel calls), or null when the request is not constrained. Throws EngineRequestError
 * when that text is longer than `maxChars`.
 */
export function structureKey(request: Omit<GenerateRequest, "signal">, maxChars: number): string | null {
  const wantsFormat = request.responseFormat !== undefined && request.responseFormat.type !== "text";
  const hasTools = (request.tools?.length ?? 0) > 0 && request.toolChoice !== "none";
  if (!wantsFormat && !hasTools) return null;
  const key = canonicalJsonWithin([request.responseFormat ?? null, request.tools ?? null, request.toolChoice ?? null, request.parallelToolCalls ?? null], maxChars);
  if (key !== null) return key;
  const error = new SchemaLimitError("size", maxChars, undefined, wantsFormat ? "response_format with tools" : "all tools together");
  throw new EngineRequestError(`${error.message.charAt(0).toUpperCase()}${error.message.slice(1)}.`, wantsFormat ? "response_format" : "tools", "schema_too_complex");
}
