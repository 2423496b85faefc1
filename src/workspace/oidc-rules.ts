// The parts of single sign-on's configuration serve checks before anything starts (no library
// behind them, so every CLI command stays light): the issuer's URL and the operator rule.

/**
 * `CLAIM=VALUE`: the claim (a dotted path into nested objects, e.g. realm_access.roles) equals
 * VALUE, or is a list holding VALUE, or a space-separated string holding it as a word (as scope-like
 * claims are). Only the first `=` separates, so VALUE may itself contain `=`.
 */
export interface ClaimRule {
  path: string[];
  value: string;
  /** As the operator wrote it, for messages. */
  text: string;
}

export function parseClaimRule(text: string): ClaimRule {
  const i = text.indexOf("=");
  const claim = i < 0 ? "" : text.slice(0, i).trim();
  const value = i < 0 ? "" : text.slice(i + 1).trim();
  if (!claim || !value || claim.split(".").some((p) => p === "")) {
    throw new Error(`expected CLAIM=VALUE, e.g. groups=sluice-admins or realm_access.roles=operator, not ${JSON.stringify(text)}`);
  }
  return { path: claim.split("."), value, text };
}

export function claimMatches(rule: ClaimRule, claims: Record<string, unknown>): boolean {
  let v: unknown = claims;
  for (const key of rule.path) {
    if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
    v = (v as Record<string, unknown>)[key];
  }
  if (Array.isArray(v)) return v.some((x) => String(x) === rule.value);
  if (typeof v === "string") return v === rule.value || v.split(/\s+/).includes(rule.value);
  if (typeof v === "number" || typeof v === "boolean") return String(v) === rule.value;
  return false;
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|localhost|\[::1\])$/;

/** Whether the issuer may be plain http: only on this machine (a provider in a test, a tunnel). */
export function issuerAllowsHttp(issuer: string): boolean {
  const u = new URL(issuer);
  return u.protocol === "http:" && LOOPBACK.test(u.hostname);
}

export function checkIssuerUrl(issuer: string): void {
  let u: URL;
  try {
    u = new URL(issuer);
  } catch {
    throw new Error(`${JSON.stringify(issuer)} is not a URL`);
  }
  if (u.protocol !== "https:" && !issuerAllowsHttp(issuer)) throw new Error("the issuer must be an https:// URL (http:// only on a loopback address)");
}
