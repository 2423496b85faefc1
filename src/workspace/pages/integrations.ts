// Integrations: the base URL and configuration for SDKs and coding agents.
import { html } from "../html.ts";
import { integrationInfo, snippets } from "../integrations.ts";
import { BASE, htmlResponse, page } from "../layout.ts";
import type { Route } from "../router.ts";

export const integrationRoutes: Route[] = [
  {
    method: "GET",
    path: "/integrations",
    access: "user",
    async handle(c) {
      const models = (await c.store.catalog.listForAccount(c.user.accountId)).map((m) => m.id);
      const info = integrationInfo(c.opts.apiBase(c.request), models);
      const asked = c.url.searchParams.get("model");
      const model = asked && models.includes(asked) ? asked : (models[0] ?? "MODEL_ID");
      const body = html`<h1>Integrations</h1>
<p class="lead">Any client that takes an OpenAI-compatible base URL works unchanged. Use a key from the <a href="${BASE}/keys">Keys</a> page where these say <code>sk-sluice-…</code>.</p>
<section class="panel">
  <h2>Base URL</h2>
  <div class="secret"><input id="base-url" readonly value="${info.baseUrl}" aria-label="Base URL"><button type="button" data-copy="base-url" data-status="base-status">Copy</button></div>
  <div id="base-status" class="copy-status" aria-live="polite"></div>
  ${models.length > 1
    ? html`<form class="inline" method="get" action="${BASE}/integrations"><div class="field"><label for="model">Model in the examples</label><select id="model" name="model">${models.map((m) => html`<option${m === model ? html` selected` : ""}>${m}</option>`)}</select></div><button type="submit" class="secondary">Update</button></form>`
    : ""}
</section>
${snippets(info, model).map(
  (s) => html`<section class="panel snippet" id="${s.id}">
  <div class="snippet-head"><h3>${s.title}</h3><button type="button" class="small secondary" data-copy="code-${s.id}" data-status="status-${s.id}" aria-label="Copy the ${s.title} configuration">Copy</button></div>
  <p>${s.where}</p>
  <pre><code id="code-${s.id}" data-language="${s.language}">${s.text}</code></pre>
  <div id="status-${s.id}" class="copy-status" aria-live="polite"></div>
</section>`,
)}`;
      return htmlResponse(page({ title: "Integrations", tab: "integrations", user: c.user, csrf: c.session.csrfToken, body }));
    },
  },
];
