import type { Db } from "./db.ts";
import type { BillingStore, ChargeInput, LedgerEntry, Plan } from "./types.ts";

export interface LedgerRow {
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

export const NANO = 1e9;

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

const INSERT = `INSERT INTO ledger (account_id, kind, amount_nano, request_id, model_id, prompt_tokens, cached_tokens, completion_tokens, note, created_at)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING *`;

export const balanceNano = async (db: Db, accountId: number): Promise<number> =>
  (await db.get<{ n: number }>("SELECT coalesce(sum(amount_nano), 0) AS n FROM ledger WHERE account_id = $1", [accountId]))!.n;

/** Credit the requests in flight hold for the account. */
export const reservedNano = async (db: Db, accountId: number): Promise<number> =>
  (await db.get<{ n: number }>("SELECT coalesce(sum(reserved_nano), 0) AS n FROM inflight WHERE account_id = $1", [accountId]))!.n;

export async function planOf(db: Db, accountId: number): Promise<Plan> {
  const r = await db.get<{ plan: Plan }>("SELECT plan FROM accounts WHERE id = $1", [accountId]);
  if (!r) throw new Error(`no account with id ${accountId}`);
  return r.plan;
}

/** Charges a finished request at the model's current prices (one statement: no price read apart). */
export async function insertCharge(db: Db, c: ChargeInput): Promise<LedgerEntry | null> {
  const p = await db.get<{ i: number; c: number | null; o: number }>(
    "SELECT input_price_per_mtok AS i, cached_input_price_per_mtok AS c, output_price_per_mtok AS o FROM models WHERE id = $1",
    [c.modelId],
  );
  if (!p) return null;
  const cached = c.cachedTokens ?? 0;
  const nano = chargeNano(c.promptTokens, c.completionTokens, p.i, p.o, cached, p.c);
  const row = await db.get<LedgerRow>(INSERT, [c.accountId, "charge", -nano, c.requestId, c.modelId, c.promptTokens, cached, c.completionTokens, null, c.at ?? Date.now()]);
  return toEntry(row!);
}

export function billingStore(db: Db): BillingStore {
  const balanceUsd = async (accountId: number) => (await balanceNano(db, accountId)) / NANO;
  return {
    plan: (accountId) => planOf(db, accountId),
    async setPlan(accountId, p) {
      if (p !== "prepaid" && p !== "unlimited") throw new Error(`unknown plan ${JSON.stringify(p)}: use prepaid or unlimited`);
      if ((await db.run("UPDATE accounts SET plan = $1 WHERE id = $2", [p, accountId])) === 0) throw new Error(`no account with id ${accountId}`);
    },
    balanceUsd,
    async hasCredit(accountId) {
      if ((await planOf(db, accountId)) === "unlimited") return true;
      return (await balanceNano(db, accountId)) - (await reservedNano(db, accountId)) > 0;
    },
    charge: (c) => insertCharge(db, c),
    async topUp(accountId, usd, note) {
      if (!Number.isFinite(usd) || usd <= 0) throw new Error("a top-up must be a positive amount of USD");
      await planOf(db, accountId);
      return toEntry((await db.get<LedgerRow>(INSERT, [accountId, "topup", Math.round(usd * NANO), null, null, null, null, null, note, Date.now()]))!);
    },
    history: async (accountId, opts = {}) =>
      (
        await db.all<LedgerRow>(
          `SELECT * FROM ledger WHERE account_id = $1 AND created_at >= $2 AND created_at < $3
           ORDER BY created_at DESC, id DESC LIMIT $4`,
          [accountId, opts.since ?? 0, opts.until ?? Number.MAX_SAFE_INTEGER, opts.limit ?? 100],
        )
      ).map(toEntry),
    async summary(accountId, since, until = Number.MAX_SAFE_INTEGER) {
      const t = (await db.get<{ spend: number; topups: number }>(
        `SELECT coalesce(sum(CASE WHEN kind = 'charge' THEN -amount_nano END), 0) AS spend,
                coalesce(sum(CASE WHEN kind = 'topup' THEN amount_nano END), 0) AS topups
         FROM ledger WHERE account_id = $1 AND created_at >= $2 AND created_at < $3`,
        [accountId, since, until],
      ))!;
      return { plan: await planOf(db, accountId), balanceUsd: await balanceUsd(accountId), spendUsd: t.spend / NANO, topUpsUsd: t.topups / NANO };
    },
  };
}
