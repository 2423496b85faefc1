// A key's own limits as people write them (the CLI's flags, the workspace's form, the admin API's
// JSON): a budget in USD, its period, an expiry as a duration or a date, a list of model ids. Below
// the rooms: the CLI, the workspace and the admin API read them alike and say the same errors.
import { BUDGET_PERIODS as PERIODS, type BudgetPeriod, type KeyLimits } from "./store/index.ts";

const UNITS_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** "none" (or blank, where a form sends it) clears a limit. */
const cleared = (v: string) => v.trim() === "none";

/**
 * An expiry: a duration from now (90s, 30m, 12h, 30d, 2w), an ISO date (2027-01-31: the end of
 * that UTC day) or date-time with a zone (2027-01-31T12:00:00Z). In the past is refused.
 */
export function parseExpiry(value: string, now = Date.now()): number {
  const v = value.trim();
  const d = /^(\d+(?:\.\d+)?)(s|m|h|d|w)$/.exec(v);
  if (d) {
    const ms = Math.round(Number(d[1]) * UNITS_MS[d[2]!]!);
    if (ms <= 0) throw new Error(`expiry ${JSON.stringify(value)} is not in the future`);
    return now + ms;
  }
  let at: number;
  if (/^\d{4}-\d{2}-\d{2}$/.test(v)) at = Date.parse(`${v}T00:00:00Z`) + 86_400_000;
  else if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(v)) at = Date.parse(v);
  else throw new Error(`expiry ${JSON.stringify(value)}: give a duration (90s, 30m, 12h, 30d, 2w), a date (2027-01-31, valid through that UTC day) or a date-time with a zone (2027-01-31T12:00:00Z)`);
  if (!Number.isFinite(at)) throw new Error(`expiry ${JSON.stringify(value)} is not a real date`);
  if (at <= now) throw new Error(`expiry ${JSON.stringify(value)} is in the past`);
  return at;
}

export function parseBudget(value: string): number | null {
  if (cleared(value)) return null;
  const n = Number(value.trim().replace(/^\$/, ""));
  if (value.trim() === "" || !Number.isFinite(n) || n <= 0 || n > 1e9) throw new Error(`a budget is a positive amount of USD (e.g. 25 or 0.5), or none; not ${JSON.stringify(value)}`);
  return n;
}

export function parsePeriod(value: string): BudgetPeriod {
  const v = value.trim() as BudgetPeriod;
  if (!PERIODS.includes(v)) throw new Error(`a budget period is day, month or total, not ${JSON.stringify(value)}`);
  return v;
}

/** Model ids separated by commas (spaces allowed), or none. */
export function parseModels(value: string): string[] | null {
  if (cleared(value)) return null;
  const ids = value.split(",").map((s) => s.trim()).filter((s) => s !== "");
  if (ids.length === 0) throw new Error("give the models as ID,ID… (or none: every model of the account)");
  return [...new Set(ids)];
}

/** The text inputs of a key's limits (absent: unchanged) as the store takes them; throws a clear error. */
export function keyLimitsFrom(input: { budgetUsd?: string; budgetPeriod?: string; expires?: string; models?: string }, now = Date.now()): Partial<KeyLimits> {
  const out: Partial<KeyLimits> = {};
  if (input.budgetUsd !== undefined) out.budgetUsd = parseBudget(input.budgetUsd);
  if (input.budgetPeriod !== undefined) out.budgetPeriod = parsePeriod(input.budgetPeriod);
  if (input.expires !== undefined) out.expiresAt = cleared(input.expires) ? null : parseExpiry(input.expires, now);
  if (input.models !== undefined) out.models = parseModels(input.models);
  if (out.budgetPeriod !== undefined && out.budgetUsd === null) throw new Error("a budget period needs a budget");
  return out;
}

/** How a key's limits read in a list: "$5/month", "expires …", "models a, b". */
export function describeBudget(k: { budgetUsd: number | null; budgetPeriod: BudgetPeriod | null }): string | null {
  if (k.budgetUsd === null) return null;
  return `$${k.budgetUsd}${k.budgetPeriod === "total" || k.budgetPeriod === null ? " total" : `/${k.budgetPeriod}`}`;
}
