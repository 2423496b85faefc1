// What a form's POST has to say to the page its redirect leads to (a notice, an error, a new key
// shown once): every form is answered 303 and the next GET shows it, so that reloading that page
// never sends the form again (a second key, a second top-up). It travels in a short-lived cookie,
// read and cleared by that GET. For a signed-in user it is encrypted (AES-GCM) with a key drawn
// from the session's CSRF token, which lives in the shared store: whichever node the GET reaches
// can read it, and the cookie alone (a new key!) is of no use without the session.
import { clearCookie, cookies, redirect, setCookie } from "./http.ts";

/** What a form's answer needs of the request's context (router.ts' BaseCtx or SignedCtx). */
interface FormCtx {
  request: Request;
  /** Present once signed in: its CSRF token seals the flash. */
  session?: { csrfToken: string };
}

export const FLASH_COOKIE = "sluice_flash";
/** A flash nobody read within this long (the redirect not followed) is dropped by the browser. */
const FLASH_SECONDS = 120;

export interface Flash {
  ok?: string;
  error?: string;
  /** A key just created: shown once, with the label and prefix the list shows it by. */
  created?: { key: string; label: string | null; prefix: string };
  /** What a form had in it, to fill it again after an error (never a password). */
  fields?: Record<string, string>;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64url");
const unb64 = (s: string) => new Uint8Array(Buffer.from(s, "base64url"));

async function keyFor(secret: string): Promise<CryptoKey> {
  const raw = await crypto.subtle.digest("SHA-256", encoder.encode(`sluice workspace flash\u0000${secret}`));
  return crypto.subtle.importKey("raw", raw, "AES-GCM", false, ["encrypt", "decrypt"]);
}

/** The Set-Cookie value carrying `flash` to the next GET; `secret`: the session's CSRF token, null before sign-in. */
export async function flashCookie(request: Request, flash: Flash, secret: string | null): Promise<string> {
  const text = encoder.encode(JSON.stringify(flash));
  let value: string;
  if (secret === null) value = `p.${b64(text)}`;
  else {
    const iv = crypto.getRandomValues(new Uint8Array(12));
    const sealed = new Uint8Array(await crypto.subtle.encrypt({ name: "AES-GCM", iv }, await keyFor(secret), text));
    value = `e.${b64(iv)}.${b64(sealed)}`;
  }
  return setCookie(request, FLASH_COOKIE, value, { maxAgeSeconds: FLASH_SECONDS, sameSite: "Strict" });
}

/** The flash the request carries, or null (none, or one sealed for another session). */
export async function readFlash(request: Request, secret: string | null): Promise<Flash | null> {
  const value = cookies(request).get(FLASH_COOKIE);
  if (!value) return null;
  try {
    const [kind, a, b] = value.split(".");
    let text: string;
    // A signed-in user's flashes are sealed: an unsealed one is not theirs.
    if (kind === "p" && a && secret === null) text = decoder.decode(unb64(a));
    else if (kind === "e" && a && b && secret !== null) {
      text = decoder.decode(await crypto.subtle.decrypt({ name: "AES-GCM", iv: unb64(a) }, await keyFor(secret), unb64(b)));
    } else return null;
    const flash = JSON.parse(text) as Flash;
    return typeof flash === "object" && flash !== null ? flash : null;
  } catch {
    return null;
  }
}

/** A form's answer: 303 to `location`, carrying `flash` to the page there. */
export async function redirectWithFlash(c: FormCtx, location: string, flash: Flash, headers: Record<string, string | string[]> = {}): Promise<Response> {
  const secret = c.session?.csrfToken ?? null;
  const extra = headers["set-cookie"] ?? [];
  return redirect(location, { ...headers, "set-cookie": [...(Array.isArray(extra) ? extra : [extra]), await flashCookie(c.request, flash, secret)] });
}

/** The Set-Cookie value that clears the flash once a page has shown it. */
export const clearFlash = (request: Request) => clearCookie(request, FLASH_COOKIE);
