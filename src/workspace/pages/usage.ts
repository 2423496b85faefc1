// Usage: requests and tokens per day and per model, recent requests, a date range, CSV export.
import type { DailyUsage, UsageRow } from "../../store/index.ts";
import { barChart, rowChart } from "../charts.ts";
import { DAY_MS, integer, isoDay, parseDay, timeCell } from "../format.ts";
import { html } from "../html.ts";
import { BASE, htmlResponse, page, scrollTable } from "../layout.ts";
import type { Route, SignedCtx } from "../router.ts";

export const MAX_RANGE_DAYS = 366;

/**
 * A day as the rest of the pages write it, YYYY-MM-DD: not type="date", which a browser shows in
 * its own locale's order (MM/DD/YYYY in en-US) beside ISO dates everywhere else.
 */
const DAY_INPUT = html`type="text" inputmode="numeric" pattern="[0-9]{4}-[0-9]{2}-[0-9]{2}" placeholder="YYYY-MM-DD" maxlength="10" size="10" autocomplete="off"`;

/** The [since, until) range of the query's from/to days (inclusive, UTC); the last 14 days by default. */
export function usageRange(url: URL, now = Date.now()): { since: number; until: number; from: string; to: string } {
  const today = parseDay(isoDay(now))!;
  let to = parseDay(url.searchParams.get("to")) ?? today;
  let from = parseDay(url.searchParams.get("from")) ?? to - 13 * DAY_MS;
  if (from > to) [from, to] = [to, from];
  if (to - from > MAX_RANGE_DAYS * DAY_MS) from = to - MAX_RANGE_DAYS * DAY_MS;
  return { since: from, until: to + DAY_MS, from: isoDay(from), to: isoDay(to) };
}

/** Every day of the range, with zeros where nothing happened, so gaps show as gaps. */
export function fillDays(rows: DailyUsage[], since: number, until: number): DailyUsage[] {
  const byDay = new Map(rows.map((r) => [r.day, r]));
  const out: DailyUsage[] = [];
  for (let t = since; t < until; t += DAY_MS) {
    const day = isoDay(t);
    out.push(byDay.get(day) ?? { day, requests: 0, promptTokens: 0, completionTokens: 0, cachedTokens: 0, reasoningTokens: 0 });
  }
  return out;
}

export async function usageData(c: SignedCtx) {
  const r = usageRange(c.url);
  const id = c.user.accountId;
  return {
    range: r,
    daily: fillDays(await c.store.usageReports.daily(id, r.since, r.until), r.since, r.until),
    byModel: await c.store.usageReports.byModel(id, r.since, r.until),
    recent: await c.store.usage.list(id, { since: r.since, until: r.until, limit: 100 }),
  };
}

const csvCell = (v: string | number | null) => {
  const s = v === null ? "" : String(v);
  // Quote as RFC 4180 asks, and defuse spreadsheet formulas in free text.
  const safe = /^[=+\-@\t\r]/.test(s) && typeof v === "string" ? `'${s}` : s;
  return /[",\n\r]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
};

export function usageCsv(rows: UsageRow[]): string {
  // cached_tokens are part of prompt_tokens and reasoning_tokens part of completion_tokens, as in the API's usage.
  const head = ["time", "request_id", "model", "prompt_tokens", "cached_tokens", "completion_tokens", "reasoning_tokens", "total_tokens", "latency_ms", "status", "finish_reason", "key_id", "user"];
  const lines = rows.map((u) =>
    [new Date(u.createdAt).toISOString(), u.requestId, u.modelId, u.promptTokens, u.cachedTokens, u.completionTokens, u.reasoningTokens, u.promptTokens + u.completionTokens, u.latencyMs, u.status, u.finishReason, u.keyId, u.user]
      .map(csvCell)
      .join(","),
  );
  return [head.join(","), ...lines].join("\r\n") + "\r\n";
}

async function usagePage(c: SignedCtx) {
  const { range, daily, byModel, recent } = await usageData(c);
  const total = daily.reduce(
    (a, d) => ({ r: a.r + d.requests, p: a.p + d.promptTokens, c: a.c + d.completionTokens, cached: a.cached + d.cachedTokens, reasoning: a.reasoning + d.reasoningTokens }),
    { r: 0, p: 0, c: 0, cached: 0, reasoning: 0 },
  );
  const qs = `from=${range.from}&to=${range.to}`;
  const labels = daily.map((d) => d.day);
  const body = html`<h1>Usage</h1>
<p class="lead">Requests made with ${c.user.accountName}'s keys, by UTC day.</p>
<section class="panel">
  <form class="inline" method="get" action="${BASE}/usage" aria-label="Date range">
    <div class="field"><label for="from">From (UTC day)</label><input id="from" name="from" ${DAY_INPUT} value="${range.from}"></div>
    <div class="field"><label for="to">To (UTC day)</label><input id="to" name="to" ${DAY_INPUT} value="${range.to}"></div>
    <button type="submit">Show</button>
    <a class="button secondary right" href="${BASE}/usage.csv?${qs}" download>Export CSV</a>
  </form>
</section>
<div class="tiles">
  <div class="tile"><div class="label">Requests</div><div class="value" data-testid="total-requests">${integer(total.r)}</div></div>
  <div class="tile"><div class="label">Prompt tokens</div><div class="value">${integer(total.p)}</div></div>
  <div class="tile"><div class="label">Completion tokens</div><div class="value">${integer(total.c)}</div></div>
  <div class="tile"><div class="label">Cached prompt tokens</div><div class="value" data-testid="total-cached">${integer(total.cached)}</div></div>
  <div class="tile"><div class="label">Reasoning tokens</div><div class="value" data-testid="total-reasoning">${integer(total.reasoning)}</div></div>
</div>
<div class="grid2">
  <section class="panel">${barChart({ title: "Requests per day", labels, unit: "requests", series: [{ name: "requests", cls: "s1", values: daily.map((d) => d.requests) }] })}</section>
  <section class="panel">${barChart({
    title: "Tokens per day",
    labels,
    unit: "tokens",
    series: [
      { name: "prompt tokens", cls: "s1", values: daily.map((d) => d.promptTokens) },
      { name: "completion tokens", cls: "s2", values: daily.map((d) => d.completionTokens) },
    ],
  })}</section>
</div>
<div class="grid2">
  <section class="panel">${byModel.length
    ? rowChart({ title: "Requests per model", unit: "requests", series: [{ name: "requests", cls: "s1" }], rows: byModel.map((m) => ({ label: m.modelId, values: [m.requests] })) })
    : html`<h2>Requests per model</h2><p class="empty">No requests in this range.</p>`}</section>
  <section class="panel">${byModel.length
    ? rowChart({
        title: "Tokens per model",
        unit: "tokens",
        series: [{ name: "prompt tokens", cls: "s1" }, { name: "completion tokens", cls: "s2" }],
        rows: byModel.map((m) => ({ label: m.modelId, values: [m.promptTokens, m.completionTokens] })),
      })
    : html`<h2>Tokens per model</h2><p class="empty">No requests in this range.</p>`}</section>
</div>
<section class="panel">
  <h2>Recent requests</h2>
  ${recent.length === 0
    ? html`<p class="empty">No requests in this range.</p>`
    : scrollTable(
        "Recent requests",
        html`
    <thead><tr><th scope="col">Time</th><th scope="col">Model</th><th scope="col" class="num">Prompt</th><th scope="col" class="num">Cached</th><th scope="col" class="num">Completion</th><th scope="col" class="num">Reasoning</th><th scope="col" class="num">Latency</th><th scope="col">Status</th></tr></thead>
    <tbody>${recent.map(
      (u) => html`<tr><td class="card-title">${timeCell(u.createdAt)}</td><td class="mono" data-label="Model">${u.modelId}</td><td class="num" data-label="Prompt">${integer(u.promptTokens)}</td><td class="num" data-label="Cached">${integer(u.cachedTokens)}</td><td class="num" data-label="Completion">${integer(u.completionTokens)}</td><td class="num" data-label="Reasoning">${integer(u.reasoningTokens)}</td><td class="num" data-label="Latency">${integer(u.latencyMs)} ms</td><td class="card-aside"><span class="badge ${u.status === "ok" ? "yes" : u.status === "error" ? "bad" : ""}">${u.status}</span></td></tr>`,
    )}</tbody>`,
        html` id="recent" class="cards"`,
      )}
</section>`;
  return htmlResponse(page({ title: "Usage", tab: "usage", user: c.user, csrf: c.session.csrfToken, body }));
}

export const usageRoutes: Route[] = [
  { method: "GET", path: "/usage", access: "user", handle: usagePage },
  {
    method: "GET",
    path: "/usage.csv",
    access: "user",
    async handle(c) {
      const r = usageRange(c.url);
      const rows = await c.store.usage.list(c.user.accountId, { since: r.since, until: r.until, limit: 1_000_000 });
      return new Response(usageCsv(rows), {
        headers: {
          "content-type": "text/csv; charset=utf-8",
          "content-disposition": `attachment; filename="usage-${c.user.accountName}-${r.from}-to-${r.to}.csv"`,
          "cache-control": "no-store",
        },
      });
    },
  },
];

