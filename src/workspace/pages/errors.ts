import { html } from "../html.ts";
import { BASE, bare, htmlResponse, page } from "../layout.ts";
import type { BaseCtx, SignedCtx } from "../router.ts";

export function errorPage(c: BaseCtx | SignedCtx, status: number, title: string, text: string): Response {
  const body = html`<h1>${title}</h1><section class="panel"><p>${text}</p><p><a href="${BASE}/">Back to the workspace</a></p></section>`;
  if ("user" in c) return htmlResponse(page({ title, tab: "", user: c.user, csrf: c.session.csrfToken, body }), status);
  return htmlResponse(bare(title, body), status);
}

export const notFoundPage = (c: BaseCtx | SignedCtx) => errorPage(c, 404, "Not found", "There is no such page, or it belongs to another account.");
