// Billing: plan, balance, spend in the period, history of charges and top-ups.
import type { SignedCtx } from "../router.ts";
import { integer, timeCell, usdColumn } from "../format.ts";
import { html } from "../html.ts";
import { htmlResponse, page, scrollTable } from "../layout.ts";
import type { Route } from "../router.ts";

/** The current calendar month in UTC. */
export function billingPeriod(now = Date.now()) {
  const d = new Date(now);
  const since = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
  const until = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  return { since, until, label: new Date(since).toLocaleString("en-US", { month: "long", year: "numeric", timeZone: "UTC" }) };
}

export async function billingData(c: SignedCtx) {
  const period = billingPeriod();
  const id = c.user.accountId;
  return { period, summary: await c.store.billing.summary(id, period.since, period.until), history: await c.store.billing.history(id, { limit: 100 }) };
}

export const billingRoutes: Route[] = [
  {
    method: "GET",
    path: "/billing",
    access: "user",
    async handle(c) {
      const { period, summary, history } = await billingData(c);
      const unlimited = summary.plan === "unlimited";
      // One number of decimals for every amount on the page, the fewest that shows each exactly:
      // the rows add up to the totals as shown.
      const usd = usdColumn([summary.balanceUsd, summary.spendUsd, summary.topUpsUsd, ...history.map((e) => e.amountUsd)]);
      const body = html`<h1>Billing</h1>
<p class="lead">Each request is charged at the model's prices when it finishes. ${unlimited ? "This account's plan is unlimited: requests are never refused for credit." : "Requests are refused with 429 insufficient_quota once the credit is used up."}</p>
<div class="tiles">
  <div class="tile"><div class="label">Plan</div><div class="value">${unlimited ? "Unlimited" : "Prepaid"}</div></div>
  <div class="tile"><div class="label">Credit balance</div><div class="value" data-testid="balance">${unlimited ? "∞" : usd(summary.balanceUsd)}</div></div>
  <div class="tile"><div class="label">Spend in ${period.label}</div><div class="value" data-testid="spend">${usd(summary.spendUsd)}</div></div>
  <div class="tile"><div class="label">Top-ups in ${period.label}</div><div class="value">${usd(summary.topUpsUsd)}</div></div>
</div>
<section class="panel">
  <h2>History</h2>
  ${history.length === 0
    ? html`<p class="empty">No charges or top-ups yet.</p>`
    : scrollTable(
        "History",
        html`
  <thead><tr><th scope="col">Time</th><th scope="col">Type</th><th scope="col">Details</th><th scope="col" class="num">Amount</th></tr></thead>
  <tbody>${history.map(
    (e) => html`<tr><td class="card-title">${timeCell(e.createdAt)}</td><td data-label="Type"><span class="badge ${e.kind === "topup" ? "yes" : ""}">${e.kind === "topup" ? "top-up" : "charge"}</span></td>
    <td data-label="Details">${e.kind === "charge" ? html`<code>${e.modelId}</code> · ${integer(e.promptTokens ?? 0)} in${e.cachedTokens ? html` (${integer(e.cachedTokens)} cached)` : ""} + ${integer(e.completionTokens ?? 0)} out tokens` : (e.note ?? "")}</td><td class="num card-aside" data-testid="amount">${usd(e.amountUsd)}</td></tr>`,
  )}</tbody>`,
        html` class="cards"`,
      )}
</section>`;
      return htmlResponse(page({ title: "Billing", tab: "billing", user: c.user, csrf: c.session.csrfToken, body }));
    },
  },
];
