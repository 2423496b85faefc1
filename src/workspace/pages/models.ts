// Models: the catalog this account may use.
import { describeSamplingDefaults } from "../../protocol/sampling.ts";
import type { CatalogModel } from "../../store/index.ts";
import { integer, price } from "../format.ts";
import { html } from "../html.ts";
import { htmlResponse, page, scrollTable } from "../layout.ts";
import type { Route } from "../router.ts";

const cap = (name: string, on: boolean) => html`<span class="badge ${on ? "yes" : "no"}" title="${name}: ${on ? "supported" : "not supported"}">${name}</span>`;

export const capabilityBadges = (m: CatalogModel) =>
  html`${cap("tools", m.supportsTools)}${cap("structured output", m.supportsStructured)}${cap("images", m.supportsImages)}`;

/** What a request that leaves sampling parameters out gets: the model's defaults, or the API's. */
const samplingCell = (m: CatalogModel) => {
  const d = describeSamplingDefaults(m.samplingDefaults);
  return d ? html`${d}` : html`<span class="muted">API defaults</span>`;
};

export const modelRoutes: Route[] = [
  {
    method: "GET",
    path: "/models",
    access: "user",
    async handle(c) {
      const models = await c.store.catalog.listForAccount(c.user.accountId);
      const body = html`<h1>Models</h1>
<p class="lead">The models ${c.user.accountName} can call. Prices are in USD per million tokens. A request that leaves out temperature, top_p, top_k or min_p gets the model's sampling default; a value the request gives always wins.</p>
<section class="panel">
  ${models.length === 0
    ? html`<p class="empty">No model is available to this account. Ask an operator for access.</p>`
    : scrollTable(
        "Models",
        html`
    <thead><tr><th scope="col">Model id</th><th scope="col" class="num">Context</th><th scope="col" class="num">Input</th><th scope="col" class="num">Cached input</th><th scope="col" class="num">Output</th><th scope="col">Capabilities</th><th scope="col">Sampling defaults</th></tr></thead>
    <tbody>${models.map(
      (m) => html`<tr><td class="card-title"><code>${m.id}</code>${m.displayName !== m.id ? html`<div class="muted">${m.displayName}</div>` : ""}</td><td class="num" data-label="Context">${integer(m.contextLength)}</td><td class="num" data-label="Input">${price(m.inputPricePerMTok)}</td><td class="num" data-label="Cached input">${price(m.cachedInputPricePerMTok ?? m.inputPricePerMTok)}</td><td class="num" data-label="Output">${price(m.outputPricePerMTok)}</td><td data-label="Capabilities">${capabilityBadges(m)}</td><td data-label="Sampling defaults">${samplingCell(m)}</td></tr>`,
    )}</tbody>`,
        html` class="cards"`,
      )}
</section>`;
      return htmlResponse(page({ title: "Models", tab: "models", user: c.user, csrf: c.session.csrfToken, body }));
    },
  },
];
