// Admin (operators only): accounts, users, model access per account, prices, plans and top-ups.
import { PRIORITY_RANGE, type Account, type NodeInfo, type Plan, type UserRole } from "../../store/index.ts";
import { parseBudget, parsePeriod } from "../../key-limits.ts";
import { dateTime, timeCell, usd, usdColumn } from "../format.ts";
import { html, type Html } from "../html.ts";
import { BASE, csrfField, htmlResponse, page, scrollTable } from "../layout.ts";
import { operatorCommand, type Route, type SignedCtx } from "../router.ts";
import { change } from "./admin-change.ts";
import { hubPullPanel } from "./hub-pull.ts";
import { residencyPanel } from "./residency.ts";

const PLANS: Plan[] = ["prepaid", "unlimited"];

/** What the accounts table shows of each account, read before the page is rendered. */
async function accountRows(c: SignedCtx, accounts: Account[]) {
  const rows = [];
  for (const a of accounts) {
    const plan = await c.store.billing.plan(a.id);
    rows.push({ account: a, plan, balance: plan === "unlimited" ? null : await c.store.billing.balanceUsd(a.id), keys: await c.store.keys.count(a.id) });
  }
  return rows;
}

export async function adminPage(c: SignedCtx): Promise<Response> {
  const notice = c.flash ?? {};
  const accounts = await c.store.accounts.list();
  const users = await c.store.users.list();
  const catalog = await c.store.catalog.list();
  const served = new Set((await c.store.catalog.listServed()).map((m) => m.id));
  const selected = (await c.store.accounts.get(c.url.searchParams.get("account") ?? "")) ?? accounts[0] ?? null;
  const rows = await accountRows(c, accounts);
  const balance = usdColumn(rows.map((r) => r.balance ?? 0));
  const planOf = new Map(rows.map((r) => [r.account.id, r.plan]));
  const csrf = csrfField(c.session.csrfToken);
  const accountOptions = (current?: string, withPlans = false): Html =>
    html`${accounts.map((a) => html`<option${a.name === current ? html` selected` : ""}${withPlans ? html` data-plan="${planOf.get(a.id)!}"` : ""}>${a.name}</option>`)}`;
  const planOptions = (current: Plan): Html => html`${PLANS.map((p) => html`<option${p === current ? html` selected` : ""}>${p}</option>`)}`;
  const allowed = selected ? new Set((await c.store.catalog.listForAccount(selected.id)).map((m) => m.id)) : new Set<string>();
  const limits = selected ? await rateLimitPanel(c, selected, csrf, catalog.map((m) => m.id)) : "";
  const nodes = c.store.kind === "postgres" ? nodesPanel(await c.store.nodes.live()) : "";
  const body = html`<h1>Admin</h1>
<p class="lead">Operator tools. Changes apply to the next API request.</p>
${notice.ok ? html`<div class="notice ok" role="status">${notice.ok}</div>` : ""}
${notice.error ? html`<div class="notice error" role="alert">${notice.error}</div>` : ""}
<section class="panel"><h2>Accounts</h2>${scrollTable(
    "Accounts",
    html`<thead><tr><th scope="col">Account</th><th scope="col">Plan</th><th scope="col" class="num">Balance</th><th scope="col" class="num">Keys</th><th scope="col" class="num">Users</th><th scope="col">Model access</th><th scope="col" class="num">Priority</th><th scope="col" class="hide-sm">Created</th></tr></thead>
  <tbody>${rows.map(({ account: a, plan, balance: credit, keys }) => {
    return html`<tr><td class="card-title"><a href="${BASE}/admin?account=${a.name}#access">${a.name}</a></td><td data-label="Plan">${plan}</td><td class="num" data-label="Balance">${credit === null ? "∞" : balance(credit)}</td><td class="num" data-label="Keys">${keys}</td><td class="num" data-label="Users">${users.filter((u) => u.accountId === a.id).length}</td><td data-label="Model access">${a.modelAccess === "all" ? "all models" : "listed models"}</td><td class="num" data-label="Priority">${a.priority}</td><td class="hide-sm" data-label="Created">${timeCell(a.createdAt)}</td></tr>`;
  })}</tbody>`,
    html` class="cards"`,
  )}
  <h3>Create an account</h3>
  <form class="inline" method="post" action="${BASE}/admin/accounts">${csrf}
    <div class="field grow"><label for="acct-name">Name</label><input id="acct-name" name="name" required pattern="[a-z0-9][a-z0-9._\\-]{0,63}" placeholder="lowercase, e.g. acme"></div>
    <div class="field"><label for="acct-plan">Plan</label><select id="acct-plan" name="plan">${planOptions("prepaid")}</select></div>
    <button type="submit">Create account</button></form>
  <h3>Priority</h3>
  <form class="inline" method="post" action="${BASE}/admin/priority" aria-label="Set a priority">${csrf}
    <div class="field"><label for="prio-acct">Account</label><select id="prio-acct" name="account">${accountOptions(selected?.name)}</select></div>
    <div class="field"><label for="prio-value">Priority</label><input id="prio-value" name="priority" type="number" min="${PRIORITY_RANGE.min}" max="${PRIORITY_RANGE.max}" step="1" value="${selected?.priority ?? 0}" required></div>
    <button type="submit" class="secondary">Set priority</button>
    <p class="muted form-note">On a busy model, higher priorities are admitted first, and their requests pause lower-priority ones when memory runs out. Accounts of one priority take turns by tokens.</p></form></section>
${nodes}
${residencyPanel(c, catalog, csrf)}
<section class="panel"><h2>Credit and plans</h2>
  <form class="inline" method="post" action="${BASE}/admin/topup" aria-label="Top up credit">${csrf}
    <div class="field"><label for="top-acct">Account</label><select id="top-acct" name="account">${accountOptions(selected?.name)}</select></div>
    <div class="field"><label for="top-usd">USD</label><input id="top-usd" name="usd" type="number" min="0.000001" step="any" required></div>
    <div class="field grow"><label for="top-note">Note</label><input id="top-note" name="note" maxlength="200" placeholder="shown in the account's billing history"></div>
    <button type="submit">Add credit</button></form>
  <form class="inline" method="post" action="${BASE}/admin/plan" aria-label="Set a plan">${csrf}
    <div class="field"><label for="plan-acct">Account</label><select id="plan-acct" name="account" data-plan-select="plan-plan">${accountOptions(selected?.name, true)}</select></div>
    <div class="field"><label for="plan-plan">Plan</label><select id="plan-plan" name="plan">${planOptions(selected ? planOf.get(selected.id)! : "prepaid")}</select></div>
    <button type="submit" class="secondary">Set plan</button>
    <p class="muted form-note">Prepaid accounts are refused once their credit is used up; unlimited ones never.</p></form></section>
<section class="panel"><h2>Users</h2>${scrollTable(
    "Users",
    html`<thead><tr><th scope="col">Email</th><th scope="col">Account</th><th scope="col">Role</th><th scope="col" class="hide-sm">Created</th></tr></thead>
  <tbody>${users.map((u) => html`<tr><td class="card-title">${u.email}</td><td data-label="Account">${u.accountName}</td><td data-label="Role">${u.role}</td><td class="hide-sm" data-label="Created">${timeCell(u.createdAt)}</td></tr>`)}</tbody>`,
    html` class="cards"`,
  )}
  <h3>Create a user</h3>
  <form class="inline" method="post" action="${BASE}/admin/users">${csrf}
    <div class="field grow"><label for="u-email">Email</label><input id="u-email" name="email" type="email" required autocomplete="off"></div>
    <div class="field grow"><label for="u-pass">Initial password</label><input id="u-pass" name="password" type="password" minlength="10" required autocomplete="new-password"></div>
    <div class="field"><label for="u-acct">Account</label><select id="u-acct" name="account">${accountOptions(selected?.name)}</select></div>
    <div class="field"><label for="u-role">Role</label><select id="u-role" name="role"><option>member</option><option>operator</option></select></div>
    <button type="submit">Create user</button></form></section>
${selected
    ? html`<section class="panel" id="access"><h2>Model access for ${selected.name}</h2>
  <form method="get" action="${BASE}/admin" class="inline"><div class="field"><label for="acc-sel">Account</label><select id="acc-sel" name="account">${accountOptions(selected.name)}</select></div><button type="submit" class="secondary">Show</button></form>
  <form method="post" action="${BASE}/admin/access" class="access">${csrf}<input type="hidden" name="account" value="${selected.name}">
  ${scrollTable(
    `Model access for ${selected.name}`,
    html`<thead><tr><th scope="col">Allowed</th><th scope="col">Model</th><th scope="col">Status</th></tr></thead>
  <tbody>${catalog.map((m) => {
    const isServed = served.has(m.id);
    return html`<tr><td class="card-aside"><input type="checkbox" name="model" value="${m.id}" id="acc-${m.id}"${allowed.has(m.id) ? html` checked` : ""}${isServed ? "" : html` disabled`}></td><td class="card-title"><label class="plain" for="acc-${m.id}"><code>${m.id}</code></label></td><td data-label="Status">${isServed ? "served" : m.loadError ? "failed to load" : m.status === "inactive" ? "disabled" : "missing"}</td></tr>`;
  })}</tbody>`,
    html` class="cards"`,
  )}
  <label class="check" for="acc-all"><input type="checkbox" name="all" value="on" id="acc-all"${selected.modelAccess === "all" ? html` checked` : ""}> Every served model, including models added later (ignores the list above)</label>
  <button type="submit">Save access</button></form></section>`
    : ""}
${limits}
${hubPullPanel(c, csrf)}
<section class="panel"><h2>Model prices</h2><p class="muted">USD per million tokens. Cached input: prompt tokens served from the prefix cache (blank: the input price).</p>${scrollTable(
    "Model prices",
    html`<thead><tr><th scope="col">Model</th><th scope="col">Input / cached input / output</th></tr></thead>
  <tbody>${catalog.map(
    (m) => html`<tr><td class="card-title"><code>${m.id}</code></td><td><form class="inline" method="post" action="${BASE}/admin/prices" aria-label="Prices of ${m.id}">${csrf}<input type="hidden" name="model" value="${m.id}">
      <div class="field"><label for="in-${m.id}">Input</label><input class="price" id="in-${m.id}" name="input" type="number" min="0" step="any" value="${m.inputPricePerMTok}" required></div>
      <div class="field"><label for="cin-${m.id}">Cached input</label><input class="price" id="cin-${m.id}" name="cached_input" type="number" min="0" step="any" value="${m.cachedInputPricePerMTok ?? ""}" placeholder="= input"></div>
      <div class="field"><label for="out-${m.id}">Output</label><input class="price" id="out-${m.id}" name="output" type="number" min="0" step="any" value="${m.outputPricePerMTok}" required></div>
      <button type="submit">Save</button></form></td></tr>`,
  )}</tbody>`,
    html` class="cards"`,
  )}</section>`;
  return htmlResponse(page({ title: "Admin", tab: "admin", user: c.user, csrf: c.session.csrfToken, body }));
}

/** The nodes sharing the database, as their heartbeats last reported them. */
function nodesPanel(nodes: NodeInfo[]): Html {
  const now = Date.now();
  return html`<section class="panel" id="nodes"><h2>Nodes</h2>
  <p class="muted">Nodes whose heartbeat is live, and the models each serves with its queue (requests running or waiting). A request for a model is answered by any node: it runs where the model is.</p>
  ${nodes.length === 0
    ? html`<p class="empty">No live node.</p>`
    : scrollTable(
        "Nodes",
        html`<thead><tr><th scope="col">Node</th><th scope="col">Address</th><th scope="col" class="hide-sm">Version</th><th scope="col" class="num">Heartbeat</th><th scope="col">Models (queue)</th></tr></thead>
  <tbody>${nodes.map(
    (n) => html`<tr data-node-id="${n.id}"><td class="card-title"><code>${n.id}</code></td><td data-label="Address">${n.url}</td><td class="hide-sm" data-label="Version">${n.version}</td><td class="num" data-label="Heartbeat">${Math.max(0, (now - n.heartbeatAt) / 1000).toFixed(1)} s ago</td><td data-label="Models (queue)">${n.models.length ? n.models.map((m, i) => html`${i ? ", " : ""}<code>${m.id}</code> (${m.queueDepth})`) : "none"}</td></tr>`,
  )}</tbody>`,
        html` class="cards"`,
      )}</section>`;
}

/** Rate limits of one account (for every model, and per model) and its budget per end user: blank means no limit. */
async function rateLimitPanel(c: SignedCtx, account: Account, csrf: Html, models: string[]): Promise<Html> {
  const { id: accountId, name } = account;
  const l = await c.store.limits.get(accountId);
  const value = (v: number | null | undefined) => (v == null ? "" : String(v));
  const all = await c.store.limits.list(accountId);
  const keyLimits = all.filter((e) => e.keyId !== null);
  const perModel = all.filter((e) => e.keyId === null && e.modelId !== null);
  return html`<section class="panel" id="limits"><h2>Rate limits for ${name}</h2>
  <p class="muted">Blank: no limit. Tokens are counted as the prompt estimate plus max_tokens when a request starts and settled with the real count when it ends.</p>
  <form class="inline" method="post" action="${BASE}/admin/limits">${csrf}<input type="hidden" name="account" value="${name}">
    <div class="field"><label for="rl-rpm">Requests / minute</label><input id="rl-rpm" name="rpm" type="number" min="1" step="1" value="${value(l?.requestsPerMinute)}"></div>
    <div class="field"><label for="rl-tpm">Tokens / minute</label><input id="rl-tpm" name="tpm" type="number" min="1" step="1" value="${value(l?.tokensPerMinute)}"></div>
    <div class="field"><label for="rl-conc">Concurrent requests</label><input id="rl-conc" name="concurrent" type="number" min="1" step="1" value="${value(l?.maxConcurrent)}"></div>
    <button type="submit">Save limits</button></form>
  <h3>For one model</h3>
  ${perModel.length
    ? html`<ul class="plain-list">${perModel.map((e) => html`<li data-model-limit="${e.modelId!}"><code>${e.modelId!}</code>: ${e.requestsPerMinute ?? "∞"} requests, ${e.tokensPerMinute ?? "∞"} tokens per minute${e.maxConcurrent ? `, ${e.maxConcurrent} at a time` : ""}</li>`)}</ul>`
    : ""}
  <form class="inline" method="post" action="${BASE}/admin/limits" aria-label="Rate limits for one model">${csrf}<input type="hidden" name="account" value="${name}">
    <div class="field"><label for="rlm-model">Model</label><select id="rlm-model" name="model">${models.map((m) => html`<option>${m}</option>`)}</select></div>
    <div class="field"><label for="rlm-rpm">Requests / minute</label><input id="rlm-rpm" name="rpm" type="number" min="1" step="1"></div>
    <div class="field"><label for="rlm-tpm">Tokens / minute</label><input id="rlm-tpm" name="tpm" type="number" min="1" step="1"></div>
    <button type="submit" class="secondary">Save model limits</button>
    <p class="muted form-note">On top of the limits above; both blank removes the model's. The x-ratelimit headers report the tightest limit that applies.</p></form>
  <h3>Budget per end user</h3>
  <form class="inline" method="post" action="${BASE}/admin/user-budget" aria-label="Budget per end user">${csrf}<input type="hidden" name="account" value="${name}">
    <div class="field"><label for="ub-usd">USD</label><input id="ub-usd" name="usd" type="number" min="0.000001" step="any" value="${account.userBudgetUsd ?? ""}" placeholder="none"></div>
    <div class="field"><label for="ub-period">Per</label><select id="ub-period" name="period">${(["day", "month", "total"] as const).map((p) => html`<option value="${p}"${p === (account.userBudgetPeriod ?? "month") ? html` selected` : ""}>${p === "total" ? "in total" : `UTC ${p}`}</option>`)}</select></div>
    <button type="submit" class="secondary">Save budget</button>
    <p class="muted form-note">What one end user (a request's <code>user</code> or <code>safety_identifier</code>) may spend; blank: no such budget.</p></form>
  ${keyLimits.length
    ? html`<p class="muted">Keys with limits of their own (set with <code>${operatorCommand(c.opts, "limits", "set", "--account", name, "--key", "KEY_ID", "--rpm", "N")}</code>): ${keyLimits.map((k) => html`<code>${k.keyId}</code> `)}</p>`
    : ""}</section>`;
}

/** A blank field is no limit; anything else must be a positive whole number. */
function limitField(c: SignedCtx, name: string, what: string): number | null {
  const v = c.field(name);
  if (v === "") return null;
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${what} must be a positive whole number, or blank for no limit`);
  return n;
}

async function account(c: SignedCtx) {
  const a = await c.store.accounts.get(c.field("account"));
  if (!a) throw new Error(`no account named ${c.field("account")}`);
  return a;
}

/** A change to the account named in the form, coming back to that account's section. */
function accountChange(c: SignedCtx, fn: (a: Account) => Promise<string>): Promise<Response> {
  return change(c, async () => fn(await account(c)), `${BASE}/admin?account=${encodeURIComponent(c.field("account"))}`);
}

export const adminRoutes: Route[] = [
  {
    method: "GET",
    path: "/admin",
    access: "operator",
    handle: adminPage,
  },
  {
    method: "POST",
    path: "/admin/accounts",
    access: "operator",
    handle: (c) =>
      change(c, async () => {
        const plan = c.field("plan") as Plan;
        if (!PLANS.includes(plan)) throw new Error("choose a plan");
        const a = await c.store.accounts.create(c.field("name"));
        await c.store.billing.setPlan(a.id, plan);
        return `created account ${a.name} (${plan})`;
      }),
  },
  {
    method: "POST",
    path: "/admin/users",
    access: "operator",
    handle: (c) =>
      change(c, async () => {
        const role = c.field("role") as UserRole;
        const u = await c.store.users.create({ accountId: (await account(c)).id, email: c.field("email"), password: c.fields("password")[0] ?? "", role });
        return `created user ${u.email} in ${u.accountName}`;
      }),
  },
  {
    method: "POST",
    path: "/admin/topup",
    access: "operator",
    handle: (c) =>
      change(c, async () => {
        const a = await account(c);
        const amount = Number(c.field("usd"));
        await c.store.billing.topUp(a.id, amount, c.field("note") || `top-up by ${c.user.email}`);
        return `added ${usd(amount)} to ${a.name}`;
      }),
  },
  {
    method: "POST",
    path: "/admin/plan",
    access: "operator",
    handle: (c) =>
      change(c, async () => {
        const a = await account(c);
        const plan = c.field("plan") as Plan;
        if (!PLANS.includes(plan)) throw new Error("choose a plan");
        await c.store.billing.setPlan(a.id, plan);
        return `${a.name} is now on the ${c.field("plan")} plan`;
      }),
  },
  {
    method: "POST",
    path: "/admin/access",
    access: "operator",
    handle: (c) =>
      accountChange(c, async (a) => {
        if (c.field("all") === "on") {
          await c.store.catalog.allowAll(a.id);
          return `${a.name} may use every served model`;
        }
        const want = new Set(c.fields("model"));
        const have = new Set((await c.store.catalog.listForAccount(a.id)).map((m) => m.id));
        for (const m of await c.store.catalog.listServed()) {
          if (want.has(m.id) && !have.has(m.id)) await c.store.catalog.grant(a.id, m.id);
          if (!want.has(m.id) && have.has(m.id)) await c.store.catalog.revoke(a.id, m.id);
        }
        return `saved model access for ${a.name}`;
      }),
  },
  {
    method: "POST",
    path: "/admin/priority",
    access: "operator",
    handle: (c) =>
      accountChange(c, async (a) => {
        const priority = Number(c.field("priority"));
        await c.store.accounts.setPriority(a.id, priority);
        return `${a.name} now has priority ${priority}`;
      }),
  },
  {
    method: "POST",
    path: "/admin/limits",
    access: "operator",
    handle: (c) =>
      accountChange(c, async (a) => {
        const model = c.field("model") || null;
        if (model && !(await c.store.catalog.get(model))) throw new Error(`no model ${model}`);
        await c.store.limits.set(
          a.id,
          null,
          {
            requestsPerMinute: limitField(c, "rpm", "Requests per minute"),
            tokensPerMinute: limitField(c, "tpm", "Tokens per minute"),
            maxConcurrent: limitField(c, "concurrent", "Concurrent requests"),
          },
          model,
        );
        return `saved rate limits for ${a.name}${model ? ` on ${model}` : ""}`;
      }),
  },
  {
    method: "POST",
    path: "/admin/user-budget",
    access: "operator",
    handle: (c) =>
      accountChange(c, async (a) => {
        const usd = c.field("usd") === "" ? null : parseBudget(c.field("usd"));
        await c.store.accounts.setUserBudget(a.id, usd, parsePeriod(c.field("period") || "month"));
        return usd === null ? `${a.name} has no budget per end user` : `${a.name}: $${usd} per end user per ${c.field("period") || "month"}`;
      }),
  },
  {
    method: "POST",
    path: "/admin/prices",
    access: "operator",
    handle: (c) =>
      change(c, async () => {
        const id = c.field("model");
        const cached = c.field("cached_input").trim();
        if (!(await c.store.catalog.setPrices(id, Number(c.field("input")), Number(c.field("output")), cached === "" ? null : Number(cached)))) throw new Error(`no model ${id}`);
        return `saved prices of ${id}`;
      }),
  },
];
