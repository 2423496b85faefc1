// The page frame: header, navigation tabs, and the security headers every page carries.
import { html, type Html, type Part } from "./html.ts";
import type { User } from "../store/index.ts";
import { ASSET_VERSION } from "./assets.ts";

export const BASE = "/workspace";

export interface Tab {
  id: string;
  label: string;
  href: string;
  operatorOnly?: boolean;
}

export const TABS: Tab[] = [
  { id: "keys", label: "Keys", href: `${BASE}/keys` },
  { id: "usage", label: "Usage", href: `${BASE}/usage` },
  { id: "models", label: "Models", href: `${BASE}/models` },
  { id: "integrations", label: "Integrations", href: `${BASE}/integrations` },
  { id: "billing", label: "Billing", href: `${BASE}/billing` },
  { id: "admin", label: "Admin", href: `${BASE}/admin`, operatorOnly: true },
  { id: "audit", label: "Audit log", href: `${BASE}/audit`, operatorOnly: true },
];

export const SECURITY_HEADERS: Record<string, string> = {
  // Everything is served from here: no inline script, no third-party origin, no framing.
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "same-origin",
  "cache-control": "no-store",
};

function document(title: string, body: Part): Html {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · Sluice workspace</title>
<link rel="icon" href="${BASE}/favicon.ico">
<link rel="stylesheet" href="${BASE}/assets/app.css?v=${ASSET_VERSION}">
<script src="${BASE}/assets/app.js?v=${ASSET_VERSION}" defer></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
${body}
</body>
</html>`;
}

export interface PageFrame {
  title: string;
  tab: string;
  user: User;
  csrf: string;
  body: Part;
}

export function page(f: PageFrame): Html {
  const tabs = TABS.filter((t) => !t.operatorOnly || f.user.role === "operator");
  return document(
    f.title,
    html`<header class="top"><div class="bar">
  <a class="brand" href="${BASE}/">Sluice <span>workspace</span></a>
  <div class="who"><span class="email">${f.user.email}</span><span class="badge" title="${f.user.accountName}">${f.user.accountName}</span>
    <form method="post" action="${BASE}/signout"><input type="hidden" name="_csrf" value="${f.csrf}"><button type="submit">Sign out</button></form>
  </div>
</div></header>
<nav class="tabs" aria-label="Workspace"><ul>${tabs.map(
      (t) => html`<li><a href="${t.href}"${t.id === f.tab ? html` aria-current="page"` : ""}>${t.label}</a></li>`,
    )}</ul></nav>
<main id="main" tabindex="-1">
${f.body}
</main>`,
  );
}

export function bare(title: string, body: Part): Html {
  return document(title, html`<main id="main" tabindex="-1">${body}</main>`);
}

export const htmlResponse = (h: Html, status = 200, headers: Record<string, string> = {}) =>
  new Response(h.value, { status, headers: { "content-type": "text/html; charset=utf-8", ...SECURITY_HEADERS, ...headers } });

/**
 * A table in a container of its own that scrolls sideways when the table is wider than the page
 * (a phone), so the page itself never does; app.js makes it focusable then, for the keyboard.
 */
export const scrollTable = (label: string, inner: Part, attrs: Html = html``): Html =>
  html`<div class="table-wrap" role="region" aria-label="${label}"><table${attrs}>${inner}</table></div>`;

export const csrfField = (token: string) => html`<input type="hidden" name="_csrf" value="${token}">`;
