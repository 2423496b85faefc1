import type { Database } from "bun:sqlite";
import type { BillingStore, LedgerEntry, Plan } from "./types.ts";

interface LedgerRow {
  id: number;
  account_id: number;
  kind: "charge" | "topup";
  amount_nano: number;
  request_id: string | null;
  model_id: string | null;
  prompt_tokens: number | null;
  cached_tokens: number | null;
  completion_tokens: number | null;
  note: string | null;
  created_at: number;
}

const NANO = 1e9;

const toEntry = (r: LedgerRow): LedgerEntry => ({
  id: r.id,
  accountId: r.account_id,
  kind: r.kind,
  amountUsd: r.amount_nano / NANO,
  requestId: r.request_id,
  modelId: r.model_id,
  promptTokens: r.prompt_tokens,
  cachedTokens: r.cached_tokens,
  completionTokens: r.completion_tokens,
  note: r.note,
  createdAt: r.created_at,
});

/**
 * The price of a request in nano-USD. Prices are USD per million tokens, so one token at price p
 * costs p micro-USD = 1000·p nano-USD; rounding once per request keeps the ledger in integers.
 * Of the prompt tokens, the `cachedTokens` the prefix cache served cost the cached-input price
 * (the input price when there is none).
 */
export function chargeNano(
  promptTokens: number,
  completionTokens: number,
  inputPerMTok: number,
  outputPerMTok: number,
  cachedTokens = 0,
  cachedInputPerMTok: number | null = null,
): number {
  const cached = Math.min(cachedTokens, promptTokens);
  return Math.round(
    (promptTokens - cached) * inputPerMTok * 1000 + cached * (cachedInputPerMTok ?? inputPerMTok) * 1000 + completionTokens * outputPerMTok * 1000,
  );
}

export function billingStore(db: Database): BillingStore {
  const planOf = db.query<{ plan: Plan }, [number]>("SELECT plan FROM accounts WHERE id = ?");
  const setPlan = db.query("UPDATE accounts SET plan = ? WHERE id = ?");
  const balance = db.query<{ n: number }, [number]>(
    "SELECT coalesce(sum(amount_nano), 0) AS n FROM ledger WHERE account_id = ?",
  );
  const prices = db.query<{ i: number; c: number | null; o: number }, [string]>(
    "SELECT input_price_per_mtok AS i, cached_input_price_per_mtok AS c, output_price_per_mtok AS o FROM models WHERE id = ?",
  );
  const insert = db.query<LedgerRow, [number, string, number, string | null, string | null, number | null, number | null, number | null, string | null, number]>(
    `INSERT INTO ledger (account_id, kind, amount_nano, request_id, model_id, prompt_tokens, cached_tokens, completion_tokens, note, created_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *`,
  );
  const history = db.query<LedgerRow, [number, number, number, number]>(
    `SELECT * FROM ledger WHERE account_id = ? AND created_at >= ? AND created_at < ?
     ORDER BY created_at DESC, id DESC LIMIT ?`,
  );
  const totals = db.query<{ spend: number; topups: number }, [number, number, number]>(
    `SELECT coalesce(sum(CASE WHEN kind = 'charge' THEN -amount_nano END), 0) AS spend,
            coalesce(sum(CASE WHEN kind = 'topup' THEN amount_nano END), 0) AS topups
     FROM ledger WHERE account_id = ? AND created_at >= ? AND created_at < ?`,
  );

  const plan = (accountId: number): Plan => {
    const r = planOf.get(accountId);
    if (!r) throw new Error(`no account with id ${accountId}`);
    return r.plan;
  };
  const balanceUsd = (accountId: number) => balance.get(accountId)!.n / NANO;

  return {
    plan,
    setPlan(accountId, p) {
      if (p !== "prepaid" && p !== "unlimited") throw new Error(`unknown plan ${JSON.stringify(p)}: use prepaid or unlimited`);
      if (setPlan.run(p, accountId).changes === 0) throw new Error(`no account with id ${accountId}`);
    },
    balanceUsd,
    hasCredit: (accountId) => plan(accountId) === "unlimited" || balance.get(accountId)!.n > 0,
    charge(c) {
      const p = prices.get(c.modelId);
      if (!p) return null;
      const cached = c.cachedTokens ?? 0;
      const nano = chargeNano(c.promptTokens, c.completionTokens, p.i, p.o, cached, p.c);
      return toEntry(
        insert.get(c.accountId, "charge", -nano, c.requestId, c.modelId, c.promptTokens, cached, c.completionTokens, null, c.at ?? Date.now())!,
      );
    },
    topUp(accountId, usd, note) {
      if (!Number.isFinite(usd) || usd <= 0) throw new Error("a top-up must be a positive amount of USD");
      plan(accountId);
      return toEntry(insert.get(accountId, "topup", Math.round(usd * NANO), null, null, null, null, null, note, Date.now())!);
    },
    history: (accountId, opts = {}) =>
      history.all(accountId, opts.since ?? 0, opts.until ?? Number.MAX_SAFE_INTEGER, opts.limit ?? 100).map(toEntry),
    summary(accountId, since, until = Number.MAX_SAFE_INTEGER) {
      const t = totals.get(accountId, since, until)!;
      return { plan: plan(accountId), balanceUsd: balanceUsd(accountId), spendUsd: t.spend / NANO, topUpsUsd: t.topups / NANO };
    },
  };
}
