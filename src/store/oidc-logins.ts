import type { Db } from "./db.ts";
import { hashKey } from "./keys.ts";
import type { OidcLoginStore } from "./types.ts";

export function oidcLoginStore(db: Db): OidcLoginStore {
  return {
    async begin(state, { nonce, codeVerifier }, ttlMs) {
      const now = Date.now();
      // Sign-ins abandoned at the provider go with the next one begun.
      await db.run("DELETE FROM oidc_logins WHERE expires_at <= $1", [now]);
      await db.run("INSERT INTO oidc_logins (state_hash, nonce, code_verifier, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)", [
        hashKey(state),
        nonce,
        codeVerifier,
        now,
        now + ttlMs,
      ]);
    },
    async take(state) {
      // One statement reads and removes it: two callbacks with the same state cannot both have it.
      const r = await db.get<{ nonce: string; code_verifier: string; expires_at: number }>(
        "DELETE FROM oidc_logins WHERE state_hash = $1 RETURNING nonce, code_verifier, expires_at",
        [hashKey(state)],
      );
      if (!r || r.expires_at <= Date.now()) return null;
      return { nonce: r.nonce, codeVerifier: r.code_verifier };
    },
  };
}
