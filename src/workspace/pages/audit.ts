// Admin (operators only): the audit log, newest first, with the state of its hash chain.
import { dateTime, parseDay } from "../format.ts";
import { html } from "../html.ts";
import { BASE, htmlResponse, page, scrollTable } from "../layout.ts";
import { operatorCommand, type Route, type SignedCtx } from "../router.ts";

const SHOWN = 200;

/** A state as one short line of JSON (the log never holds secrets). */
const brief = (v: unknown) => (v === null || v === undefined ? "—" : JSON.stringify(v));

async function auditPage(c: SignedCtx) {
  const since = parseDay(c.url.searchParams.get("since")) ?? 0;
  const entries = await c.store.audit.list({ since, limit: SHOWN });
  const verdict = await c.store.audit.verify();
  const body = html`<h1>Audit log</h1>
<p class="lead">Every change made through the CLI, this workspace or the admin API: who made it (the OS user, the signed-in user or the admin token's label), from where, what it changed and how. Entries are only ever appended; each one's hash covers the one before it.</p>
${verdict.ok
    ? html`<div class="notice ok" role="status" data-testid="audit-verdict">Hash chain intact: ${verdict.rows} ${verdict.rows === 1 ? "entry" : "entries"} verified.</div>`
    : html`<div class="notice error" role="alert" data-testid="audit-verdict">The audit log was tampered with: ${verdict.problem}.</div>`}
<section class="panel">
  <form class="inline" method="get" action="${BASE}/audit" aria-label="Since">
    <div class="field"><label for="since">Since</label><input id="since" name="since" type="date" value="${since ? new Date(since).toISOString().slice(0, 10) : ""}"></div>
    <button type="submit">Show</button>
    <p class="muted form-note">The newest ${SHOWN} are shown; all of them with <code>${operatorCommand(c.opts, "audit", "list", "--format", "json")}</code>.</p>
  </form>
  ${entries.length === 0
    ? html`<p class="empty">No changes recorded yet.</p>`
    : scrollTable(
        "Audit log",
        html`<thead><tr><th scope="col" class="num">#</th><th scope="col">Time (UTC)</th><th scope="col">Who</th><th scope="col">Action</th><th scope="col">Target</th><th scope="col">Before → after</th></tr></thead>
  <tbody>${entries.map(
    (e) => html`<tr data-seq="${e.seq}"><td class="num">${e.seq}</td><td class="nowrap">${dateTime(e.at)}</td><td>${e.actor}<div class="muted">${e.actorKind}${e.source ? html` · ${e.source}` : ""}</div></td><td><code>${e.action}</code></td><td class="mono">${e.target ?? "—"}</td><td class="mono change"><div>${brief(e.before)}</div><div>→ ${brief(e.after)}</div></td></tr>`,
  )}</tbody>`,
        html` id="audit"`,
      )}
</section>`;
  return htmlResponse(page({ title: "Audit log", tab: "audit", user: c.user, csrf: c.session.csrfToken, body }));
}

export const auditRoutes: Route[] = [{ method: "GET", path: "/audit", access: "operator", handle: auditPage }];
