import { BodyTimeout, CLOSE_CONNECTION, readBodyBytes } from "../read-body.ts";
import { ApiError, badRequest } from "./errors.ts";

/**
 * Reads a JSON body under a byte limit, with the errors OpenAI clients expect; also its text as
 * received (what a forwarded request passes on unchanged).
 */
export async function readJsonText(request: Request, maxBytes: number, timeoutMs = 0): Promise<{ text: string; value: unknown }> {
  const type = request.headers.get("content-type") ?? "";
  if (!/^application\/json\s*(;|$)/i.test(type)) {
    throw new ApiError(
      415,
      `Unsupported content type ${JSON.stringify(type || "(none)")}: send the body as application/json.`,
      "invalid_request_error",
      null,
      "unsupported_content_type",
    );
  }
  const tooLarge = () =>
    new ApiError(
      413,
      `Request body too large: the limit is ${maxBytes} bytes.`,
      "invalid_request_error",
      null,
      "request_too_large",
    );
  const declared = Number(request.headers.get("content-length") ?? "NaN");
  if (Number.isFinite(declared) && declared > maxBytes) throw tooLarge();
  let bytes: Uint8Array;
  try {
    bytes = await readBodyBytes(request, timeoutMs);
  } catch (e) {
    if (e instanceof BodyTimeout) {
      throw new ApiError(408, `${e.message} Send the whole body promptly (this server waits at most serve --body-timeout-seconds).`, "invalid_request_error", null, "request_timeout", CLOSE_CONNECTION);
    }
    throw badRequest("The request body could not be read completely.", null, "invalid_body");
  }
  if (bytes.byteLength > maxBytes) throw tooLarge();
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw badRequest("The request body is not valid UTF-8.", null, "invalid_body");
  }
  try {
    return { text, value: JSON.parse(text) };
  } catch (e) {
    throw badRequest(
      `We could not parse the JSON body of your request: ${(e as Error).message}`,
      null,
      "invalid_json",
    );
  }
}

/**
 * Nesting a request body may have. Far above what any valid request needs (a schema's own limit,
 * serve --max-schema-depth, is lower), and low enough that every recursive walk after this
 * point (validation, chat templates, structured cloning to a model's worker) is safe.
 */
export const MAX_BODY_DEPTH = 512;

/** Whether objects and arrays in `value` nest deeper than `max`; iterative, so any depth is safe to ask about. */
export function nestedDeeperThan(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v !== "object") continue;
    if (depth >= max) return true;
    for (const child of Array.isArray(v) ? v : Object.values(v as Record<string, unknown>)) {
      if (child !== null && typeof child === "object") stack.push([child, depth + 1]);
    }
  }
  return false;
}
