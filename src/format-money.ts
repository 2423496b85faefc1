// US dollars as people read them, for the CLI and the workspace alike: "$5.00", "$0.50" a million
// tokens, and charges of cheap models to the nano-dollar the store keeps ("$0.000001234"), never
// "$5", "$0.5" or "5.000000000". Amounts shown together (a history and its totals) share one
// number of decimals, the fewest that shows every one of them exactly, so they add up as printed.

/** The store counts money in nano-dollars: no amount has more decimals than this. */
const MAX_DIGITS = 9;

/** Decimals (2 to 9) that show `n` exactly, to the nano-dollar. */
export function moneyDigits(n: number): number {
  const nano = Math.round(Math.abs(n) * 1e9);
  for (let d = 2; d < MAX_DIGITS; d++) if (nano % 10 ** (MAX_DIGITS - d) === 0) return d;
  return MAX_DIGITS;
}

/** "$1,234.50", "−$0.000001234": at least two decimals, and as many as the amount has (or `digits`). */
export function usd(n: number, digits = moneyDigits(n)): string {
  const s = Math.abs(n).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  return `${n < 0 && s.replace(/[0.,]/g, "") !== "" ? "−" : ""}$${s}`;
}

/** One formatter for amounts shown together: every one with the decimals the most precise needs. */
export function usdColumn(amounts: number[]): (n: number) => string {
  const digits = Math.max(2, ...amounts.map(moneyDigits));
  return (n) => usd(n, digits);
}
