// Keys: create (the key is shown once), list, revoke after a confirmation page.
import { dateTime, timeCell } from "../format.ts";
import { html } from "../html.ts";
import { redirectWithFlash } from "../flash.ts";
import { BASE, csrfField, htmlResponse, page, scrollTable } from "../layout.ts";
import type { Route, SignedCtx } from "../router.ts";
import { notFoundPage } from "./errors.ts";

async function keysPage(c: SignedCtx) {
  const keys = (await c.store.keys.list(c.user.accountId)).sort((a, b) => Number(a.revokedAt !== null) - Number(b.revokedAt !== null) || b.createdAt - a.createdAt);
  const notice = c.flash ?? {};
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
  <form class="inline" method="post" action="${BASE}/keys">${csrfField(c.session.csrfToken)}
    <div class="field grow"><label for="label">Label</label><input id="label" name="label" maxlength="80" placeholder="e.g. laptop, CI, editor" value="${notice.fields?.label ?? ""}" required></div>
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
    <thead><tr><th scope="col">Label</th><th scope="col">Key</th><th scope="col" class="hide-sm">Created</th><th scope="col">Last used</th><th scope="col">Status</th><th scope="col"><span class="hide-sm">Actions</span></th></tr></thead>
    <tbody>${keys.map(
      (k) => html`<tr class="${k.revokedAt ? "revoked" : ""}" data-key-id="${k.id}"><td class="card-title">${k.label ?? "—"}</td><td class="mono" data-label="Key">${k.prefix}…</td><td class="hide-sm">${timeCell(k.createdAt)}</td><td data-label="Last used">${k.lastUsedAt ? timeCell(k.lastUsedAt) : "never"}</td>
      <td class="card-aside">${k.revokedAt ? html`<span class="badge bad">revoked</span>` : html`<span class="badge yes">active</span>`}</td>
      <td>${k.revokedAt ? "" : html`<a class="button small danger-outline" href="${BASE}/keys/${k.id}/revoke" aria-label="Revoke key ${k.label ?? k.prefix}">Revoke</a>`}</td></tr>`,
    )}</tbody>`,
        html` class="cards"`,
      )}
</section>`;
  return htmlResponse(page({ title: "API keys", tab: "keys", user: c.user, csrf: c.session.csrfToken, body }));
}

/** How the list and the notices name a key: its label and the prefix the list shows. */
const keyName = (k: { label: string | null; prefix: string }) => (k.label ? `“${k.label}” (${k.prefix}…)` : `${k.prefix}…`);

const ownActiveKey = async (c: SignedCtx) =>
  (await c.store.keys.list(c.user.accountId)).find((k) => k.id === c.params.id && k.revokedAt === null) ?? null;

export const keyRoutes: Route[] = [
  { method: "GET", path: "/keys", access: "user", handle: keysPage },
  {
    method: "POST",
    path: "/keys",
    access: "user",
    async handle(c) {
      const label = c.field("label");
      // Answered with a redirect, the key travelling to the next page in the flash: a reload of
      // that page shows the list again, and never makes a second key.
      if (!label || label.length > 80) return redirectWithFlash(c, `${BASE}/keys`, { error: "Give the key a label of 1 to 80 characters.", fields: { label: label.slice(0, 80) } });
      const { key, info } = await c.store.keys.create(c.user.accountId, label);
      return redirectWithFlash(c, `${BASE}/keys`, { created: { key, label: info.label, prefix: info.prefix } });
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
