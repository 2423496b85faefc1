// The hop between nodes: a forwarded request carries who it speaks for (account, key, request in
// flight) and an HMAC-SHA256 over those, the time and the body, with the cluster secret. A node
// trusts those headers only with a valid signature less than a minute old, so a client cannot
// claim to be a node, and a captured hop cannot be replayed with another body or later.
import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import { HOP_HEADER, type HopIdentity } from "../api/chat/forwarding.ts";
const FIELDS = {
  account: "x-sluice-hop-account",
  accountName: "x-sluice-hop-account-name",
  key: "x-sluice-hop-key",
  inflight: "x-sluice-hop-inflight",
  estimate: "x-sluice-hop-estimate",
} as const;
const MAX_SKEW_MS = 60_000;

function mac(secret: string, at: number, hop: HopIdentity, body: string): string {
  const digest = createHash("sha256").update(body).digest("hex");
  const text = [at, hop.requestId, hop.accountId, hop.accountName, hop.keyId ?? "", hop.inflightId, hop.estimatedTokens, digest].join("\n");
  return createHmac("sha256", secret).update(text).digest("hex");
}

/** The headers of a forwarded request (the request id travels as x-request-id). */
export function hopHeaders(secret: string, hop: HopIdentity, body: string, now = Date.now()): Record<string, string> {
  return {
    [HOP_HEADER]: `v1.${now}.${mac(secret, now, hop, body)}`,
    [FIELDS.account]: String(hop.accountId),
    [FIELDS.accountName]: hop.accountName,
    [FIELDS.key]: hop.keyId ?? "",
    [FIELDS.inflight]: hop.inflightId,
    [FIELDS.estimate]: String(hop.estimatedTokens),
    "x-request-id": hop.requestId,
  };
}

export type HopCheck = { ok: true; hop: HopIdentity } | { ok: false; reason: string } | null;

/** null without a hop header; else the identity, or why the hop is refused. */
export function verifyHop(secret: string, headers: Headers, body: string, now = Date.now()): HopCheck {
  const claim = headers.get(HOP_HEADER);
  if (claim === null) return null;
  const m = /^v1\.(\d{1,16})\.([0-9a-f]{64})$/.exec(claim);
  if (!m) return { ok: false, reason: "malformed hop signature" };
  const at = Number(m[1]);
  if (Math.abs(now - at) > MAX_SKEW_MS) return { ok: false, reason: "hop signature expired (are the nodes' clocks in step?)" };
  const hop: HopIdentity = {
    requestId: headers.get("x-request-id") ?? "",
    accountId: Number(headers.get(FIELDS.account)),
    accountName: headers.get(FIELDS.accountName) ?? "",
    keyId: headers.get(FIELDS.key) || null,
    inflightId: headers.get(FIELDS.inflight) ?? "",
    estimatedTokens: Number(headers.get(FIELDS.estimate) ?? "0"),
  };
  if (!Number.isInteger(hop.accountId) || !hop.inflightId || !hop.requestId || !Number.isFinite(hop.estimatedTokens)) {
    return { ok: false, reason: "incomplete hop headers" };
  }
  const want = Buffer.from(mac(secret, at, hop, body), "hex");
  if (!timingSafeEqual(want, Buffer.from(m[2]!, "hex"))) return { ok: false, reason: "wrong hop signature (is --cluster-secret the same on every node?)" };
  return { ok: true, hop };
}
