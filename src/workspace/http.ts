// Request plumbing for the workspace: cookies, small bodies, CSRF comparison, redirects.
import { BodyTimeout, readBodyBytes } from "../read-body.ts";

export const SESSION_COOKIE = "sluice_session";
/** Double-submit token for the sign-in form, before there is a session to hold one. */
export const PRE_COOKIE = "sluice_signin";
export const MAX_FORM_BYTES = 64 * 1024;

export function cookies(request: Request): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (request.headers.get("cookie") ?? "").split(";")) {
    const i = part.indexOf("=");
    if (i <= 0) continue;
    const name = part.slice(0, i).trim();
    if (!out.has(name)) out.set(name, decodeURIComponent(part.slice(i + 1).trim()));
  }
  return out;
}

export function isHttps(request: Request): boolean {
  return new URL(request.url).protocol === "https:" || request.headers.get("x-forwarded-proto") === "https";
}

export function setCookie(
  request: Request,
  name: string,
  value: string,
  opts: { maxAgeSeconds?: number; sameSite?: "Lax" | "Strict"; path?: string } = {},
): string {
  const parts = [`${name}=${encodeURIComponent(value)}`, `Path=${opts.path ?? "/workspace"}`, "HttpOnly", `SameSite=${opts.sameSite ?? "Lax"}`];
  if (opts.maxAgeSeconds !== undefined) parts.push(`Max-Age=${opts.maxAgeSeconds}`);
  if (isHttps(request)) parts.push("Secure");
  return parts.join("; ");
}

export const clearCookie = (request: Request, name: string) => setCookie(request, name, "", { maxAgeSeconds: 0 });

/** Constant-time comparison of two tokens. */
export function sameToken(a: string | null | undefined, b: string | null | undefined): boolean {
  if (!a || !b) return false;
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  if (x.length !== y.length) return false;
  let diff = 0;
  for (let i = 0; i < x.length; i++) diff |= x[i]! ^ y[i]!;
  return diff === 0;
}

export class BodyError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Fields of a urlencoded form or a JSON object (values as strings), at most MAX_FORM_BYTES, arrived within `timeoutMs`. */
export async function readFields(request: Request, timeoutMs = 0): Promise<Map<string, string[]>> {
  const declared = Number(request.headers.get("content-length") ?? "0");
  if (declared > MAX_FORM_BYTES) throw new BodyError(413, "The request body is too large.");
  let text: string;
  try {
    text = new TextDecoder().decode(await readBodyBytes(request, timeoutMs));
  } catch (e) {
    if (e instanceof BodyTimeout) throw new BodyError(408, `${e.message} Send the form again.`);
    throw new BodyError(400, "The request body could not be read completely.");
  }
  if (text.length > MAX_FORM_BYTES) throw new BodyError(413, "The request body is too large.");
  const type = (request.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
  const out = new Map<string, string[]>();
  const add = (k: string, v: string) => out.set(k, [...(out.get(k) ?? []), v]);
  if (type === "application/json") {
    let body: unknown;
    try {
      body = text === "" ? {} : JSON.parse(text);
    } catch {
      throw new BodyError(400, "The request body is not valid JSON.");
    }
    if (typeof body !== "object" || body === null || Array.isArray(body)) throw new BodyError(400, "Send a JSON object.");
    for (const [k, v] of Object.entries(body)) {
      if (Array.isArray(v)) for (const x of v) add(k, String(x));
      else if (v !== null && v !== undefined) add(k, String(v));
    }
    return out;
  }
  if (type === "application/x-www-form-urlencoded" || type === "") {
    for (const [k, v] of new URLSearchParams(text)) add(k, v);
    return out;
  }
  throw new BodyError(415, "Send a form (application/x-www-form-urlencoded) or JSON.");
}

export const redirect = (location: string, headers: Record<string, string | string[]> = {}) => {
  const h = new Headers({ location, "cache-control": "no-store" });
  for (const [k, v] of Object.entries(headers)) for (const x of Array.isArray(v) ? v : [v]) h.append(k, x);
  return new Response(null, { status: 303, headers: h });
};

export const json = (body: unknown, status = 200) =>
  Response.json(body, { status, headers: { "cache-control": "no-store", "x-content-type-options": "nosniff" } });
