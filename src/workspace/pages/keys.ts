// Keys: create (the key is shown once) with optional limits of its own (a budget per day, month or
// in total, an expiry, a model list), change those limits, list, revoke after a confirmation page.
import { describeBudget, keyLimitsFrom } from "../../key-limits.ts";
import { BUDGET_PERIODS, periodStart, type ApiKeyInfo, type KeyLimits } from "../../store/index.ts";
import { redirectWithFlash } from "../flash.ts";
import { dateTime, timeCell, usd } from "../format.ts";
import { html, type Html } from "../html.ts";
import { BASE, csrfField, htmlResponse, page, scrollTable } from "../layout.ts";
import type { Route, SignedCtx } from "../router.ts";
import { notFoundPage } from "./errors.ts";

/** An expiry as the form shows it and reads it back unchanged. */
const isoSeconds = (ms: number) => new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");

/** The form fields of a key's limits, filled with `k`'s (or empty for a new key). */
async function limitFields(c: SignedCtx, k: ApiKeyInfo | null): Promise<Html> {
  const models = (await c.store.catalog.listForAccount(c.user.accountId)).map((m) => m.id);
  for (const m of k?.models ?? []) if (!models.includes(m)) models.push(m);
  const chosen = new Set(k?.models ?? []);
  const period = k?.budgetPeriod ?? "month";
  return html`<div class="field"><label for="budget">Budget (USD)</label><input id="budget" name="budget_usd" type="number" min="0.000001" step="any" value="${k?.budgetUsd ?? ""}" placeholder="none"></div>
    <div class="field"><label for="period">Per</label><select id="period" name="budget_period">${BUDGET_PERIODS.map((p) => html`<option value="${p}"${p === period ? html` selected` : ""}>${p === "total" ? "in total" : `UTC ${p}`}</option>`)}</select></div>
    <div class="field"><label for="expires">Expires</label><input id="expires" name="expires" value="${k?.expiresAt ? isoSeconds(k.expiresAt) : ""}" placeholder="never, or 30d, 2027-01-31"></div>
    <fieldset class="field grow models-choice"><legend>Models (none ticked: every model of the account)</legend>${models.map(
      (m) => html`<label class="check"><input type="checkbox" name="models" value="${m}"${chosen.has(m) ? html` checked` : ""}> <code>${m}</code></label> `,
    )}</fieldset>`;
}

/** The submitted limits; blank fields clear a limit. An expiry shown unchanged is kept as it is. */
function submittedLimits(c: SignedCtx, k: ApiKeyInfo | null): Partial<KeyLimits> {
  const budget = c.field("budget_usd");
  const expires = c.field("expires");
  const models = c.fields("models").filter((m) => m !== "");
  const keepExpiry = k?.expiresAt != null && expires === isoSeconds(k.expiresAt);
  const limits = keyLimitsFrom({
    budgetUsd: budget === "" ? "none" : budget,
    budgetPeriod: budget === "" ? undefined : c.field("budget_period") || "month",
    expires: keepExpiry ? undefined : expires === "" ? "none" : expires,
    models: models.length ? models.join(",") : "none",
  });
  return limits;
}

/** Budget (with what was spent in its period), expiry and models of a key, for the list. */
async function limitsCell(c: SignedCtx, k: ApiKeyInfo): Promise<Html> {
  const parts: Html[] = [];
  if (k.budgetUsd !== null) parts.push(html`<span class="nowrap">${usd(await c.store.keys.spendUsd(k.id, periodStart(k.budgetPeriod ?? "total")))} of ${describeBudget(k)}</span>`);
  if (k.expiresAt !== null) parts.push(html`<span class="nowrap">${k.expiresAt <= Date.now() ? "expired" : "expires"} ${dateTime(k.expiresAt)}</span>`);
  if (k.models !== null) parts.push(html`<span>only ${k.models.map((m, i) => html`${i ? ", " : ""}<code>${m}</code>`)}</span>`);
  return parts.length ? html`${parts.map((p, i) => html`${i ? html`<br>` : ""}${p}`)}` : html`<span class="muted">none</span>`;
}

async function keysPage(c: SignedCtx) {
  const notice = c.flash ?? {};
  const keys = (await c.store.keys.list(c.user.accountId)).sort((a, b) => Number(a.revokedAt !== null) - Number(b.revokedAt !== null) || b.createdAt - a.createdAt);
  const cells = new Map<string, Html>();
  for (const k of keys) cells.set(k.id, await limitsCell(c, k));
  const created = notice.created;
  const body = html`<h1>API keys</h1>
<p class="lead">Keys authenticate requests to the API as <strong>${c.user.accountName}</strong>. Only a hash is stored: a key is shown once, when it is created.</p>
${created
    ? html`<div class="notice key" role="status"><strong>Your new key${created.label ? html` “${created.label}”` : ""}.</strong> Copy it now: it will not be shown again.
  <div class="secret"><input id="new-key" readonly value="${created.key}" aria-label="The new API key"><button type="button" data-copy="new-key" data-status="copy-status">Copy</button></div>
  <div id="copy-status" class="copy-status" aria-live="polite"></div></div>`
    : ""}
${notice.ok ? html`<div class="notice ok" role="status">${notice.ok}</div>` : ""}
${notice.error ? html`<div class="notice error" role="alert">${notice.error}</div>` : ""}
<section class="panel">
  <h2>Create a key</h2>
  <p class="muted">Optional limits of its own: a budget (requests that could pass it are refused), an expiry, the only models it may use.</p>
  <form class="inline" method="post" action="${BASE}/keys">${csrfField(c.session.csrfToken)}
    <div class="field grow"><label for="label">Label</label><input id="label" name="label" maxlength="80" placeholder="e.g. laptop, CI, editor" value="${notice.fields?.label ?? ""}" required></div>
    ${await limitFields(c, null)}
    <button type="submit">Create key</button>
  </form>
</section>
<section class="panel">
  <h2>Your keys</h2>
  ${keys.length === 0
    ? html`<p class="empty">No keys yet.</p>`
    : scrollTable(
        "Your keys",
        html`
    <thead><tr><th scope="col">Label</th><th scope="col">Key</th><th scope="col">Limits</th><th scope="col" class="hide-sm">Created</th><th scope="col">Last used</th><th scope="col">Status</th><th scope="col"><span class="hide-sm">Actions</span></th></tr></thead>
    <tbody>${keys.map(
      (k) => html`<tr class="${k.revokedAt ? "revoked" : ""}" data-key-id="${k.id}"><td class="card-title">${k.label ?? "—"}</td><td class="mono" data-label="Key">${k.prefix}…</td><td data-label="Limits">${cells.get(k.id)!}</td><td class="hide-sm">${timeCell(k.createdAt)}</td><td data-label="Last used">${k.lastUsedAt ? timeCell(k.lastUsedAt) : "never"}</td>
      <td class="card-aside">${k.revokedAt ? html`<span class="badge bad">revoked</span>` : k.expiresAt !== null && k.expiresAt <= Date.now() ? html`<span class="badge bad">expired</span>` : html`<span class="badge yes">active</span>`}</td>
      <td>${k.revokedAt ? "" : html`<a class="button small secondary" href="${BASE}/keys/${k.id}/edit" aria-label="Change the limits of key ${k.label ?? k.prefix}">Limits</a> <a class="button small danger-outline" href="${BASE}/keys/${k.id}/revoke" aria-label="Revoke key ${k.label ?? k.prefix}">Revoke</a>`}</td></tr>`,
    )}</tbody>`,
        html` class="cards"`,
      )}
</section>`;
  return htmlResponse(page({ title: "API keys", tab: "keys", user: c.user, csrf: c.session.csrfToken, body }));
}

async function editPage(c: SignedCtx, k: ApiKeyInfo, error?: string) {
  const body = html`<h1>Limits of a key</h1>
${error ? html`<div class="notice error" role="alert">${error}</div>` : ""}
<section class="panel">
  <p><strong>${k.label ?? "unlabelled key"}</strong> (<code>${k.prefix}…</code>, created ${dateTime(k.createdAt)}). Blank: no limit. Changes apply to the key's next request.</p>
  <form class="inline" method="post" action="${BASE}/keys/${k.id}/edit">${csrfField(c.session.csrfToken)}
    <div class="field grow"><label for="label">Label</label><input id="label" name="label" maxlength="80" value="${k.label ?? ""}" required></div>
    ${await limitFields(c, k)}
    <button type="submit">Save limits</button>
    <a class="button secondary" href="${BASE}/keys">Cancel</a>
  </form>
</section>`;
  return htmlResponse(page({ title: "Limits of a key", tab: "keys", user: c.user, csrf: c.session.csrfToken, body }));
}

/** How the list and the notices name a key: its label and the prefix the list shows. */
const keyName = (k: { label: string | null; prefix: string }) => (k.label ? `“${k.label}” (${k.prefix}…)` : `${k.prefix}…`);

const ownActiveKey = async (c: SignedCtx) =>
  (await c.store.keys.list(c.user.accountId)).find((k) => k.id === c.params.id && k.revokedAt === null) ?? null;

/** A model list may name only models the account may use. */
async function checkModels(c: SignedCtx, limits: Partial<KeyLimits>): Promise<void> {
  if (!limits.models) return;
  const allowed = new Set((await c.store.catalog.listForAccount(c.user.accountId)).map((m) => m.id));
  const other = limits.models.find((m) => !allowed.has(m));
  if (other) throw new Error(`The account may not use ${other}: a key's models are chosen among the account's.`);
}

export const keyRoutes: Route[] = [
  {
    method: "GET",
    path: "/keys",
    access: "user",
    handle: keysPage,
  },
  {
    method: "POST",
    path: "/keys",
    access: "user",
    async handle(c) {
      const label = c.field("label");
      // Answered with a redirect, the key travelling to the next page in the flash: a reload of
      // that page shows the list again, and never makes a second key.
      if (!label || label.length > 80) return redirectWithFlash(c, `${BASE}/keys`, { error: "Give the key a label of 1 to 80 characters.", fields: { label: label.slice(0, 80) } });
      let created;
      try {
        const limits = submittedLimits(c, null);
        await checkModels(c, limits);
        created = await c.store.keys.create(c.user.accountId, label, limits);
      } catch (e) {
        return redirectWithFlash(c, `${BASE}/keys`, { error: `The key was not created: ${(e as Error).message}`, fields: { label } });
      }
      return redirectWithFlash(c, `${BASE}/keys`, { created: { key: created.key, label: created.info.label, prefix: created.info.prefix } });
    },
  },
  {
    method: "GET",
    path: "/keys/:id/edit",
    access: "user",
    async handle(c) {
      const k = await ownActiveKey(c);
      return k ? editPage(c, k, c.flash?.error) : notFoundPage(c);
    },
  },
  {
    method: "POST",
    path: "/keys/:id/edit",
    access: "user",
    async handle(c) {
      const k = await ownActiveKey(c);
      if (!k) return notFoundPage(c);
      const label = c.field("label");
      const edit = `${BASE}/keys/${k.id}/edit`;
      if (!label || label.length > 80) return redirectWithFlash(c, edit, { error: "Give the key a label of 1 to 80 characters." });
      try {
        const limits = submittedLimits(c, k);
        await checkModels(c, limits);
        if (!(await c.store.keys.update(k.id, { ...limits, label }, c.user.accountId))) return notFoundPage(c);
      } catch (e) {
        return redirectWithFlash(c, edit, { error: `Nothing was changed: ${(e as Error).message}` });
      }
      return redirectWithFlash(c, `${BASE}/keys`, { ok: `The limits of key ${keyName({ label, prefix: k.prefix })} were saved. They apply to its next request.` });
    },
  },
  {
    method: "GET",
    path: "/keys/:id/revoke",
    access: "user",
    async handle(c) {
      const k = await ownActiveKey(c);
      if (!k) return notFoundPage(c);
      const body = html`<h1>Revoke a key</h1>
<section class="panel">
  <p>Revoke <strong>${k.label ?? "unlabelled key"}</strong> (<code>${k.prefix}…</code>, created ${dateTime(k.createdAt)})? Requests that use it will be refused at once. This cannot be undone.</p>
  <form class="inline" method="post" action="${BASE}/keys/${k.id}/revoke">${csrfField(c.session.csrfToken)}
    <button type="submit" class="danger">Revoke key</button>
    <a class="button secondary" href="${BASE}/keys">Cancel</a>
  </form>
</section>`;
      return htmlResponse(page({ title: "Revoke key", tab: "keys", user: c.user, csrf: c.session.csrfToken, body }));
    },
  },
  {
    method: "POST",
    path: "/keys/:id/revoke",
    access: "user",
    async handle(c) {
      // Scoped to the signed-in account: another account's key id is simply not found.
      const k = await ownActiveKey(c);
      if (!k || !(await c.store.keys.revoke(c.params.id!, c.user.accountId))) return notFoundPage(c);
      return redirectWithFlash(c, `${BASE}/keys`, { ok: `Key ${keyName(k)} was revoked. Requests with it are refused from now on.` });
    },
  },
];
