// Fetches a remote image under the policy's limits. Every hop (the first URL and each redirect
// target) is checked before connecting: http(s) only, and unless the host is explicitly allowed,
// every address its name resolves to must be public (so a redirect to 127.0.0.1 or a name that
// resolves to 169.254.169.254 is refused just like the literal address).
import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { forbiddenAddressReason } from "./address.ts";
import { ImageInputError } from "./errors.ts";
import { ACCEPTED_MIME_TYPES, mediaType } from "./formats.ts";
import type { ImageFetchPolicy } from "./policy.ts";

export interface FetchedImage {
  bytes: Uint8Array;
  contentType: string;
}

export type Resolver = (host: string) => Promise<string[]>;

const systemResolver: Resolver = async (host) => (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);

function hostAllowed(url: URL, allow: string[]): boolean {
  const host = url.hostname.replace(/^\[|\]$/g, "").toLowerCase();
  const port = url.port || (url.protocol === "https:" ? "443" : "80");
  return allow.includes(host) || allow.includes(`${host}:${port}`) || allow.includes(`[${host}]:${port}`);
}

/**
 * Throws when `url` may not be fetched under `policy`; otherwise the address to connect to. The
 * connection goes to exactly that address (the one checked), so a name that resolves differently
 * a moment later (DNS rebinding) cannot lead the fetch elsewhere.
 */
export async function checkTarget(url: URL, policy: ImageFetchPolicy, resolve: Resolver = systemResolver): Promise<string> {
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new ImageInputError(`the image URL scheme '${url.protocol.slice(0, -1)}' is not supported (use https, http or a data: URL)`);
  }
  if (url.username || url.password) throw new ImageInputError("image URLs with credentials are not fetched");
  const allowed = hostAllowed(url, policy.allowHosts);
  const host = url.hostname.replace(/^\[|\]$/g, "");
  let addresses: string[];
  if (isIP(host)) addresses = [host];
  else {
    try {
      addresses = await resolve(host);
    } catch (e) {
      throw new ImageInputError(`the image host '${host}' could not be resolved (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
    }
    if (addresses.length === 0) throw new ImageInputError(`the image host '${host}' has no address`);
  }
  if (!allowed) {
    for (const a of addresses) {
      const why = forbiddenAddressReason(a);
      if (why) throw new ImageInputError(`the image host '${host}' is ${why} (${a}), which is not fetched`);
    }
  }
  return addresses[0]!;
}

/** The request for `url` sent to `address`: the name stays in Host and in TLS (SNI and certificate check). */
function pinned(url: URL, address: string): { target: URL; host: string | null; serverName: string | null } {
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (isIP(host)) return { target: url, host: null, serverName: null };
  const target = new URL(url);
  target.hostname = isIP(address) === 6 ? `[${address}]` : address;
  return { target, host: url.host, serverName: host };
}

// Codes Bun's fetch gives certificate and handshake failures (the OpenSSL verify codes plus Node's).
const TLS_FAILURE = /^(ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_|DEPTH_ZERO_SELF_SIGNED_CERT$|SELF_SIGNED_CERT_IN_CHAIN$|HOSTNAME_MISMATCH$)/;

/**
 * GETs an image, following at most `maxRedirects` redirects, each re-checked. https is verified
 * against the URL's host name even though the connection goes to the pinned address. `ca`
 * replaces the system's trusted roots (tests use it for a local CA); an operator who needs a
 * private CA sets NODE_EXTRA_CA_CERTS, which Bun adds to the system roots at start.
 */
export async function fetchImage(raw: string, policy: ImageFetchPolicy, resolve: Resolver = systemResolver, ca?: string | string[]): Promise<FetchedImage> {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ImageInputError("the image URL is not a valid URL");
  }
  const signal = AbortSignal.timeout(policy.timeoutMs);
  const timedOut = () => new ImageInputError(`fetching the image took longer than ${policy.timeoutMs} ms`);
  try {
    for (let hop = 0; ; hop++) {
      const { target, host, serverName } = pinned(url, await checkTarget(url, policy, resolve));
      const headers: Record<string, string> = { accept: [...ACCEPTED_MIME_TYPES].join(", ") };
      if (host) headers.host = host;
      const tls = url.protocol === "https:" ? { ...(serverName ? { serverName } : {}), ...(ca ? { ca } : {}) } : {};
      const res = await fetch(target, { redirect: "manual", signal, headers, tls });
      if (res.status >= 300 && res.status < 400 && res.headers.has("location")) {
        await res.body?.cancel();
        if (hop >= policy.maxRedirects) throw new ImageInputError(`the image URL redirected more than ${policy.maxRedirects} times`);
        url = new URL(res.headers.get("location")!, url);
        continue;
      }
      if (!res.ok) {
        await res.body?.cancel();
        throw new ImageInputError(`fetching the image failed with HTTP status ${res.status}`);
      }
      const type = mediaType(res.headers.get("content-type"));
      if (!ACCEPTED_MIME_TYPES.has(type)) {
        await res.body?.cancel();
        throw new ImageInputError(`the image URL returned content type '${type || "none"}', not PNG, JPEG, WebP or GIF`);
      }
      const declared = Number(res.headers.get("content-length"));
      if (Number.isFinite(declared) && declared > policy.maxBytes) {
        await res.body?.cancel();
        throw new ImageInputError(`the image is ${declared} bytes, more than the limit of ${policy.maxBytes}`);
      }
      return { bytes: await readLimited(res, policy.maxBytes), contentType: type };
    }
  } catch (e) {
    if (e instanceof ImageInputError) throw e;
    if (signal.aborted) throw timedOut();
    // Bun's own message names the pinned address and suggests `verbose: true`: say what failed instead.
    const code = (e as NodeJS.ErrnoException).code;
    if (code && TLS_FAILURE.test(code)) {
      throw new ImageInputError(`the TLS certificate of the image host '${url.hostname}' could not be verified for that name (${code})`);
    }
    throw new ImageInputError(`fetching the image failed: ${(e as Error).message}`);
  }
}

async function readLimited(res: Response, max: number): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let total = 0;
  const reader = res.body!.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > max) {
      await reader.cancel();
      throw new ImageInputError(`the image is larger than the limit of ${max} bytes`);
    }
    chunks.push(value);
  }
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}
