import type { ApiKeyInfo, Store } from "../store/index.ts";
import { invalidApiKey } from "./errors.ts";

/** The key behind the request's Bearer token; throws the 401 every authenticated route returns. */
export function authenticate(store: Store, request: Request): ApiKeyInfo {
  const header = request.headers.get("authorization");
  if (!header) {
    throw invalidApiKey(
      "You didn't provide an API key. Provide it in the Authorization header as 'Bearer sk-sluice-…'.",
    );
  }
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match) throw invalidApiKey("Malformed Authorization header: expected 'Bearer <API key>'.");
  const key = store.keys.authenticate(match[1]!);
  // The same message for unknown and revoked keys: nothing is learnt by probing.
  if (!key) throw invalidApiKey("Incorrect API key provided. Create or look up your keys in the account workspace.");
  store.keys.touch(key.id);
  return key;
}
