import type { ApiKeyInfo, Store } from "../store/index.ts";
import { invalidApiKey } from "./errors.ts";

// The same message for unknown and revoked keys: nothing is learnt by probing.
const unknownKey = () => invalidApiKey("Incorrect API key provided. Create or look up your keys in the account workspace.");

function bearer(request: Request): string {
  const header = request.headers.get("authorization");
  if (!header) {
    throw invalidApiKey(
      "You didn't provide an API key. Provide it in the Authorization header as 'Bearer sk-sluice-…'.",
    );
  }
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match) throw invalidApiKey("Malformed Authorization header: expected 'Bearer <API key>'.");
  return match[1]!;
}

/** A key past its expiry: said plainly (the holder can do something about it), checked on every request. */
const expired = (key: ApiKeyInfo) =>
  invalidApiKey(
    `This API key expired at ${new Date(key.expiresAt!).toISOString()}. Create a new key in the account workspace, or ask an operator to extend this one's expiry.`,
  );

function used(store: Store, key: ApiKeyInfo): ApiKeyInfo {
  // Against the clock on every request, cached or not: an expiry holds to the millisecond on every node.
  if (key.expiresAt !== null && key.expiresAt <= Date.now()) throw expired(key);
  // Advisory, written at most every 30 s per key; the store's touch never rejects.
  void store.keys.touch(key.id);
  return key;
}

/**
 * The key behind the request's Bearer token; throws the 401 every authenticated route returns.
 * Synchronous when the key is in the store's cache (the hot path), a promise otherwise.
 */
export function authenticate(store: Store, request: Request): ApiKeyInfo | Promise<ApiKeyInfo> {
  const plain = bearer(request);
  const cached = store.keys.peek(plain);
  if (cached === null) throw unknownKey();
  if (cached) return used(store, cached);
  return store.keys.authenticate(plain).then((key) => {
    if (!key) throw unknownKey();
    return used(store, key);
  });
}
