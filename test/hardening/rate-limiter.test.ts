// The token-bucket limiter on its own, with a hand-driven clock: requests, tokens (estimate then
// settle), concurrency, several scopes, and the header formats.
import { describe, expect, test } from "bun:test";
import { formatDuration, rateHeaders } from "../../src/api/limits/headers.ts";
import { estimateRequestTokens } from "../../src/api/limits/estimate.ts";
import { RateLimiter, type LimitScope } from "../../src/api/limits/rate-limiter.ts";

const scope = (id: string, rpm: number | null, tpm: number | null, conc: number | null): LimitScope => ({
  id,
  limits: { requestsPerMinute: rpm, tokensPerMinute: tpm, maxConcurrent: conc },
});

describe("RateLimiter", () => {
  test("requests per minute: a full minute's allowance, then refusal with the wait until one refills", () => {
    let now = 0;
    const rl = new RateLimiter(() => now);
    const s = [scope("a", 3, null, null)];
    for (let i = 0; i < 3; i++) {
      const t = rl.admit(s, 0, false);
      expect(t.ok).toBe(true);
      expect(t.state.requests!.remaining).toBe(2 - i);
    }
    const r = rl.admit(s, 0, false);
    expect(r.ok).toBe(false);
    if (r.ok) throw new Error("unreachable");
    expect(r.dimension).toBe("requests");
    expect(r.retryAfterMs).toBeCloseTo(20_000, 0);
    now = 20_000;
    expect(rl.admit(s, 0, false).ok).toBe(true);
    expect(rl.admit(s, 0, false).ok).toBe(false);
  });

  test("tokens: the estimate is taken up front and the unused part given back at the end", () => {
    let now = 0;
    const rl = new RateLimiter(() => now);
    const s = [scope("a", null, 1000, null)];
    const t = rl.admit(s, 800, true);
    if (!t.ok) throw new Error("refused");
    expect(t.state.tokens!.remaining).toBe(200);
    const r = rl.admit(s, 300, true);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.dimension).toBe("tokens");
    t.finish(100); // used 100 of the 800 reserved
    const t2 = rl.admit(s, 300, true);
    if (!t2.ok) throw new Error("refused after settling");
    expect(t2.state.tokens!.remaining).toBe(600);
    t.finish(100); // idempotent
    expect(rl.admit(s, 601, true).ok).toBe(false);
  });

  test("an estimate above a whole minute needs a full bucket, not more", () => {
    let now = 0;
    const rl = new RateLimiter(() => now);
    const s = [scope("a", null, 100, null)];
    const t = rl.admit(s, 5000, false);
    expect(t.ok).toBe(true);
    if (t.ok) t.finish(50);
    expect(rl.admit(s, 5000, false).ok).toBe(false);
    now = 30_000;
    expect(rl.admit(s, 5000, false).ok).toBe(true);
  });

  test("concurrency: slots are held until finish", () => {
    const rl = new RateLimiter(() => 0);
    const s = [scope("a", null, null, 2)];
    const a = rl.admit(s, 0, true);
    const b = rl.admit(s, 0, true);
    const c = rl.admit(s, 0, true);
    expect([a.ok, b.ok, c.ok]).toEqual([true, true, false]);
    if (!c.ok) expect(c.dimension).toBe("concurrency");
    // Requests that take no slot (e.g. /v1/models) are not held back by running generations.
    expect(rl.admit(s, 0, false).ok).toBe(true);
    if (a.ok) a.finish(0);
    expect(rl.running("a")).toBe(1);
    expect(rl.admit(s, 0, true).ok).toBe(true);
  });

  test("an account and a key limit both apply; the headers show the tighter one", () => {
    const rl = new RateLimiter(() => 0);
    const s = [scope("account:1", 10, null, null), scope("key:k", 2, null, null)];
    const t = rl.admit(s, 0, false);
    expect(t.state.requests).toEqual({ limit: 2, remaining: 1, resetMs: 30_000 });
    rl.admit(s, 0, false);
    const r = rl.admit(s, 0, false);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.scope).toBe("key:k");
    // The other key of the account still has the account's allowance left (8 of 10).
    const other = rl.admit([scope("account:1", 10, null, null)], 0, false);
    expect(other.state.requests!.remaining).toBe(7);
  });

  test("a changed limit starts a fresh bucket", () => {
    const rl = new RateLimiter(() => 0);
    rl.admit([scope("a", 1, null, null)], 0, false);
    expect(rl.admit([scope("a", 1, null, null)], 0, false).ok).toBe(false);
    expect(rl.admit([scope("a", 5, null, null)], 0, false).ok).toBe(true);
  });
});

test("durations and headers in OpenAI's format", () => {
  expect(formatDuration(20)).toBe("20ms");
  expect(formatDuration(1000)).toBe("1s");
  expect(formatDuration(1500)).toBe("1.5s");
  expect(formatDuration(360_000)).toBe("6m0s");
  expect(formatDuration(90_000)).toBe("1m30s");
  const h = rateHeaders({ requests: { limit: 60, remaining: 59, resetMs: 1000 }, tokens: null });
  expect(h).toEqual({ "x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s" });
});

test("token estimate: prompt characters / 4 plus max_tokens per choice, or what the context leaves", () => {
  const messages = [{ role: "user" as const, content: "x".repeat(400) }];
  expect(estimateRequestTokens({ messages, maxTokens: 10, n: 2 }, 2048)).toBe(104 + 20);
  expect(estimateRequestTokens({ messages, n: 1 }, 2048)).toBe(2048);
});
