// Admin: "Loaded models". What the server holds in memory under its budget (each model's state,
// weights and KV budget, requests in flight), its keep-alive (kept in the catalog: blank follows
// the model's sluice.json, else serve --keep-alive), and loading or unloading one now.
import { describeKeepAlive, keepAliveSeconds, parseKeepAlive, PINNED } from "../../engine/residency/settings.ts";
import { recordAction, type CatalogModel } from "../../store/index.ts";
import { formatBytes } from "../../format-bytes.ts";
import { dateTime } from "../format.ts";
import { html, type Html } from "../html.ts";
import { BASE, scrollTable } from "../layout.ts";
import type { Route, SignedCtx } from "../router.ts";
import { change } from "./admin-change.ts";

/** The admin page's section; empty when the server's engine does not load on demand. */
export function residencyPanel(c: SignedCtx, catalog: CatalogModel[], csrf: Html): Html | "" {
  const control = c.opts.residency;
  if (!control) return "";
  const s = control.summary();
  const stored = new Map(catalog.map((m) => [m.id, m.keepAliveSeconds]));
  const used = s.budgetBytes > 0 ? Math.round((100 * s.usedBytes) / s.budgetBytes) : 0;
  return html`<section class="panel" id="residency"><h2>Loaded models</h2>
  <p class="muted">Memory budget ${formatBytes(s.budgetBytes)}, ${formatBytes(s.usedBytes)} in use (${used}%): each loaded model's weights (the size of its ONNX files) and KV budget. A model loads on its first request and unloads once idle for its keep-alive; when a load needs room, the least recently used idle model is unloaded. Keep-alive: -1 keeps it loaded, 0 unloads it as soon as it is idle, else seconds or 30s, 5m, 2h; blank: the model's default.</p>
  ${scrollTable(
    "Loaded models",
    html`<thead><tr><th scope="col">Model</th><th scope="col">State</th><th scope="col" class="num">Memory</th><th scope="col" class="num hide-sm">Weights</th><th scope="col" class="num hide-sm">KV budget</th><th scope="col" class="num">In flight</th><th scope="col">Keep-alive</th><th scope="col"></th></tr></thead>
  <tbody>${s.models.map((m) => {
    const own = stored.get(m.model);
    const until = m.unloadAt ? html`<div class="muted">unloads ${dateTime(m.unloadAt)}</div>` : "";
    const problem = m.lastError ? html`<div class="notice error">${m.lastError}</div>` : "";
    return html`<tr data-model="${m.model}"><td class="card-title"><code>${m.model}</code>${problem}</td><td data-label="State">${m.state}${until}</td><td class="num" data-label="Memory">${m.state === "unloaded" ? "–" : formatBytes(m.bytes)}</td><td class="num hide-sm" data-label="Weights">${formatBytes(m.weightsBytes)}</td><td class="num hide-sm" data-label="KV budget">${formatBytes(m.kvBytes)}</td><td class="num" data-label="In flight">${m.activeRequests}</td>
      <td><form class="inline" method="post" action="${BASE}/admin/keep-alive" aria-label="Keep-alive of ${m.model}">${csrf}<input type="hidden" name="model" value="${m.model}">
        <div class="field"><label for="ka-${m.model}">Keep-alive (${describeKeepAlive(m.keepAliveMs)})</label><input class="price" id="ka-${m.model}" name="keep_alive" value="${own === null || own === undefined ? "" : String(own)}" placeholder="default" autocomplete="off"></div>
        <button type="submit" class="secondary">Save</button></form></td>
      <td><form method="post" action="${BASE}/admin/residency" aria-label="${m.state === "unloaded" ? "Load" : "Unload"} ${m.model}">${csrf}<input type="hidden" name="model" value="${m.model}"><input type="hidden" name="action" value="${m.state === "unloaded" ? "load" : "unload"}">
        <button type="submit"${m.state === "loading" || m.state === "unloading" ? html` disabled` : ""}>${m.state === "unloaded" ? "Load" : "Unload"}</button></form></td></tr>`;
  })}</tbody>`,
    html` class="cards"`,
  )}</section>`;
}

export const residencyRoutes: Route[] = [
  {
    method: "POST",
    path: "/admin/residency",
    access: "operator",
    handle: (c) =>
      change(
        c,
        async () => {
          const control = c.opts.residency;
          if (!control) throw new Error("this server keeps every model loaded");
          const id = c.field("model");
          if (!control.summary().models.some((m) => m.model === id)) throw new Error(`no model ${id} on this server`);
          if (c.field("action") === "load") {
            const m = await control.load(id);
            await recordAction(c.store, c.actor, "models.load", `model:${id}`, null, { state: m.state, bytes: m.bytes });
            return `loaded ${id} (${formatBytes(m.bytes)}) in ${m.lastLoadMs ?? 0} ms`;
          }
          const m = await control.unload(id);
          await recordAction(c.store, c.actor, "models.unload", `model:${id}`, null, { state: m.state });
          return `unloaded ${id}`;
        },
        `${BASE}/admin#residency`,
      ),
  },
  {
    method: "POST",
    path: "/admin/keep-alive",
    access: "operator",
    handle: (c) =>
      change(
        c,
        async () => {
          const id = c.field("model");
          const given = c.field("keep_alive").trim();
          const seconds = given === "" ? null : keepAliveSeconds(parseKeepAlive(given));
          if (!(await c.store.catalog.setKeepAlive(id, seconds))) throw new Error(`no model ${id} in the catalog`);
          if (seconds === null) return `${id} keeps its default keep-alive`;
          return seconds === PINNED ? `${id} stays loaded` : `${id} unloads after ${describeKeepAlive(seconds * 1000)} idle`;
        },
        `${BASE}/admin#residency`,
      ),
  },
];
