// Keys with limits of their own, end to end through real servers, on SQLite (one node) and on
// PostgreSQL (two nodes, each serving one of the two models and forwarding requests for the
// other's): a key's budget is never exceeded by 32 concurrent requests split across the nodes, an
// expiry holds within a second on every node, and a key's model list holds in /v1/models, in
// /v1/models/{id} and in chat completions.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { A_MODEL, B_MODEL, startPostgresDeployment, startSqliteDeployment, type Deployment } from "../helpers/deployments.ts";
import { postgresMissing } from "../helpers/postgres.ts";

const kinds = [
  { name: "sqlite, one node", start: startSqliteDeployment, skip: null },
  { name: "postgres, two nodes", start: startPostgresDeployment, skip: postgresMissing },
] as const;

for (const kind of kinds) {
  describe.skipIf(kind.skip !== null)(`keys with limits of their own (${kind.name})`, () => {
    let d: Deployment;
    beforeAll(async () => {
      d = await kind.start();
    }, 120_000);
    afterAll(async () => {
      await d?.stop();
    });

    const headers = (key: string) => ({ authorization: `Bearer ${key}`, "content-type": "application/json" });
    const listed = async (node: string, key: string) => {
      const r = await fetch(`${node}/v1/models`, { headers: headers(key) });
      expect(r.status).toBe(200);
      return ((await r.json()) as { data: { id: string }[] }).data.map((m) => m.id).sort();
    };
    const chat = (node: string, key: string, body: Record<string, unknown> = {}) =>
      fetch(`${node}/v1/chat/completions`, {
        method: "POST",
        headers: headers(key),
        body: JSON.stringify({ model: A_MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 8, temperature: 0, ...body }),
        signal: AbortSignal.timeout(30_000),
      });
    /** A new account on the unlimited plan (so only the key's own budget limits it), and a key made by the CLI with these options. */
    let n = 0;
    const keyWith = (...options: string[]) => {
      const name = `gov${++n}`;
      d.sluice("accounts", "create", name);
      d.sluice("billing", "plan", name, "unlimited");
      return { account: name, key: d.sluice("keys", "create", "--account", name, ...options).trim() };
    };
    const keyInfo = async (account: string) => (await d.store.keys.list((await d.store.accounts.get(account))!.id))[0]!;
    /** Polls until fn is true; throws after limitMs. */
    const within = async (fn: () => Promise<boolean>, limitMs: number) => {
      const t0 = performance.now();
      while (!(await fn())) {
        if (performance.now() - t0 > limitMs) throw new Error(`not within ${limitMs} ms`);
        await Bun.sleep(20);
      }
    };

    test("both nodes serve both models", async () => {
      const { key } = keyWith();
      for (const node of d.nodes) await within(async () => (await listed(node, key)).length === 2, 20_000);
    }, 30_000);

    test("32 concurrent requests split across the nodes never exceed the key's budget", async () => {
      // $1 per 1000 tokens: a request's worst case (prompt bytes, template, max_tokens) is about
      // $0.09, what it really costs about $0.03, so 32 of them would cost about $0.9 unchecked.
      for (const m of [A_MODEL, B_MODEL]) d.sluice("models", "price", m, "--input", "1000", "--output", "1000");
      const budget = 0.4;
      const { account, key } = keyWith("--budget-usd", String(budget), "--budget-period", "day", "--label", "budgeted");
      const results = await Promise.all(
        Array.from({ length: 32 }, async (_, i) => {
          const r = await chat(d.nodes[i % 2]!, key, { model: i % 4 < 2 ? A_MODEL : B_MODEL });
          return { status: r.status, body: (await r.json()) as { error?: { code: string; message: string; type: string } } };
        }),
      );
      const ok = results.filter((r) => r.status === 200);
      const refused = results.filter((r) => r.status === 429);
      expect(ok.length + refused.length).toBe(32);
      expect(ok.length).toBeGreaterThan(0);
      expect(refused.length).toBeGreaterThan(0);
      for (const r of refused) {
        expect(r.body.error!.code).toBe("insufficient_quota");
        expect(r.body.error!.type).toBe("insufficient_quota");
        expect(r.body.error!.message).toContain("this API key's budget of $0.4 per UTC day");
      }
      // What the key spent, from its usage rows (each carries its cost) and from the ledger.
      const info = await keyInfo(account);
      const spent = await d.store.keys.spendUsd(info.id, 0);
      expect(spent).toBeGreaterThan(0);
      expect(spent).toBeLessThanOrEqual(budget);
      const a = (await d.store.accounts.get(account))!;
      expect((await d.store.billing.summary(a.id, 0)).spendUsd).toBeCloseTo(spent, 9);
      expect(await d.store.inflight.list(a.id)).toEqual([]);
      // Keep going one at a time until refused: the budget holds to the end, and every 200 was billed.
      for (let i = 0; i < 40; i++) {
        const r = await chat(d.nodes[i % 2]!, key);
        await r.body?.cancel();
        if (r.status === 429) break;
        expect(r.status).toBe(200);
      }
      const final = await d.store.keys.spendUsd(info.id, 0);
      expect(final).toBeLessThanOrEqual(budget);
      // The CLI's list shows the spend against the budget.
      const row = (JSON.parse(d.sluice("keys", "list", "--account", account, "--json")) as { budget: string; spent: number }[])[0]!;
      expect(row.budget).toBe("$0.4/day");
      expect(row.spent).toBeCloseTo(final, 5);
      // Raising the budget lets the key work again, on every node, at once.
      d.sluice("keys", "update", info.id, "--budget-usd", "100");
      for (const node of d.nodes) await within(async () => {
        const r = await chat(node, key);
        await r.body?.cancel();
        return r.status === 200;
      }, 1500);
      for (const m of [A_MODEL, B_MODEL]) d.sluice("models", "price", m, "--input", "0", "--output", "0");
    }, 120_000);

    test("an expiry holds within a second on every node, with a 401 saying the key expired", async () => {
      const { account, key } = keyWith("--label", "short-lived");
      for (const node of d.nodes) expect((await chat(node, key)).status).toBe(200);
      const id = (await keyInfo(account)).id;
      d.sluice("keys", "update", id, "--expires", "3s");
      const expiresAt = (await keyInfo(account)).expiresAt!;
      expect(expiresAt).toBeGreaterThan(Date.now());
      // Before the expiry, the key still works everywhere (the change reached the nodes' caches).
      for (const node of d.nodes) expect((await fetch(`${node}/v1/models`, { headers: headers(key) })).status).toBe(200);
      for (const node of d.nodes) {
        let late = -1;
        await within(async () => {
          const r = await fetch(`${node}/v1/models`, { headers: headers(key) });
          if (r.status !== 401) return false;
          late = Date.now() - expiresAt;
          const body = (await r.json()) as { error: { code: string; message: string } };
          expect(body.error.code).toBe("invalid_api_key");
          expect(body.error.message).toContain("This API key expired at");
          return true;
        }, 10_000);
        expect(late).toBeGreaterThanOrEqual(0);
        expect(late).toBeLessThan(1000);
        const r = await chat(node, key);
        expect(r.status).toBe(401);
        expect(((await r.json()) as { error: { message: string } }).error.message).toContain("expired");
      }
      // Lifting the expiry brings it back within a second on every node.
      d.sluice("keys", "update", id, "--expires", "none");
      for (const node of d.nodes) await within(async () => (await fetch(`${node}/v1/models`, { headers: headers(key) })).status === 200, 1000);
    }, 60_000);

    test("a key's model list holds in /v1/models, /v1/models/{id} and chat, on every node", async () => {
      const { account, key } = keyWith("--models", A_MODEL);
      const id = (await keyInfo(account)).id;
      for (const node of d.nodes) {
        expect(await listed(node, key)).toEqual([A_MODEL]);
        expect((await fetch(`${node}/v1/models/${B_MODEL}`, { headers: headers(key) })).status).toBe(404);
        expect((await fetch(`${node}/v1/models/${A_MODEL}`, { headers: headers(key) })).status).toBe(200);
        const refused = await chat(node, key, { model: B_MODEL });
        expect(refused.status).toBe(404);
        expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("model_not_found");
        expect((await chat(node, key, { model: A_MODEL })).status).toBe(200);
      }
      // Another key of the same account is not narrowed.
      const other = d.sluice("keys", "create", "--account", account).trim();
      for (const node of d.nodes) expect(await listed(node, other)).toEqual([A_MODEL, B_MODEL]);
      d.sluice("keys", "update", id, "--models", `${B_MODEL}`);
      for (const node of d.nodes) await within(async () => (await listed(node, key)).join() === B_MODEL, 1000);
      d.sluice("keys", "update", id, "--models", "none");
      for (const node of d.nodes) await within(async () => (await listed(node, key)).length === 2, 1000);
    }, 60_000);

    test("a per-model rpm limit holds across the nodes, and the rate-limit headers report the tightest limit", async () => {
      const { account, key } = keyWith();
      d.sluice("limits", "set", "--account", account, "--rpm", "100");
      const out = d.sluice("limits", "set", "--account", account, "--model", A_MODEL, "--rpm", "3");
      expect(out.trim()).toBe(`account ${account} for ${A_MODEL}: rpm=3 tpm=unlimited concurrent=unlimited`);
      const statuses: number[] = [];
      for (let i = 0; i < 6; i++) {
        const r = await chat(d.nodes[i % 2]!, key, { model: A_MODEL });
        statuses.push(r.status);
        if (r.status === 200) {
          // The account's 100 per minute and the model's 3: the headers report the model's.
          expect(r.headers.get("x-ratelimit-limit-requests")).toBe("3");
          expect(Number(r.headers.get("x-ratelimit-remaining-requests"))).toBeLessThan(3);
          await r.body?.cancel();
        } else {
          const body = (await r.json()) as { error: { code: string; message: string } };
          expect(body.error.code).toBe("rate_limit_exceeded");
          expect(body.error.message).toContain(`on account '${account}' for model '${A_MODEL}': limit 3`);
          expect(r.headers.get("retry-after")).toMatch(/^\d+$/);
        }
      }
      expect(statuses.filter((s) => s === 200)).toHaveLength(3);
      expect(statuses.filter((s) => s === 429)).toHaveLength(3);
      // The other model counts only against the account's limit.
      for (let i = 0; i < 4; i++) {
        const r = await chat(d.nodes[i % 2]!, key, { model: B_MODEL });
        expect(r.status).toBe(200);
        expect(r.headers.get("x-ratelimit-limit-requests")).toBe("100");
        await r.body?.cancel();
      }
      // A key's own per-model limit applies to that key only.
      const id = (await keyInfo(account)).id;
      d.sluice("limits", "set", "--account", account, "--key", id, "--model", B_MODEL, "--rpm", "1");
      const other = d.sluice("keys", "create", "--account", account).trim();
      const first = await chat(d.nodes[0]!, key, { model: B_MODEL });
      const second = await chat(d.nodes[1]!, key, { model: B_MODEL });
      expect([first.status, second.status]).toEqual([200, 429]);
      expect(((await second.json()) as { error: { message: string } }).error.message).toContain(`on this API key for model '${B_MODEL}': limit 1`);
      expect((await chat(d.nodes[1]!, other, { model: B_MODEL })).status).toBe(200);
      const listed = d.sluice("limits", "list", "--account", account);
      expect(listed).toMatch(new RegExp(`${id} +${B_MODEL.replace(/[.]/g, "\\.")} +1 `));
      // Bad input is refused, saying why.
      const bad = d.sluiceRaw("limits", "set", "--account", account, "--model", "no/such", "--rpm", "1");
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain("no model no/such in the catalog");
      const nothing = d.sluiceRaw("limits", "set", "--account", account, "--model", A_MODEL);
      expect(nothing.code).toBe(2);
      expect(nothing.stderr).toContain("give at least one of --rpm, --tpm, --concurrent");
    }, 60_000);

    test("spend by end user: the report agrees with the usage rows, in every format; a budget per end user holds", async () => {
      for (const m of [A_MODEL, B_MODEL]) d.sluice("models", "price", m, "--input", "1000", "--output", "1000");
      const { account, key } = keyWith("--label", "first");
      const second = d.sluice("keys", "create", "--account", account, "--label", "second").trim();
      const sends: [string, Record<string, unknown>][] = [
        [key, { user: "alice" }],
        [key, { user: "alice", model: B_MODEL }],
        [second, { safety_identifier: "bob" }],
        [second, {}],
        [key, { user: "carol", max_tokens: 3 }],
      ];
      for (const [i, [k, extra]] of sends.entries()) {
        const r = await chat(d.nodes[i % 2]!, k, extra);
        expect(r.status).toBe(200);
        await r.body?.cancel();
      }
      const a = (await d.store.accounts.get(account))!;
      const rows = await d.store.usage.list(a.id);
      expect(rows).toHaveLength(5);
      const expected = new Map<string | null, { requests: number; prompt: number; completion: number; cost: number }>();
      for (const r of rows) {
        const e = expected.get(r.user) ?? { requests: 0, prompt: 0, completion: 0, cost: 0 };
        expected.set(r.user, { requests: e.requests + 1, prompt: e.prompt + r.promptTokens, completion: e.completion + r.completionTokens, cost: e.cost + r.costUsd });
      }
      expect([...expected.keys()].sort()).toEqual(["alice", "bob", "carol", null].sort() as (string | null)[]);
      const report = JSON.parse(d.sluice("usage", "report", "--account", account, "--by", "user", "--since", "1d", "--format", "json")) as { rows: { user: string | null; requests: number; prompt_tokens: number; completion_tokens: number; cost_usd: number }[] };
      expect(report.rows).toHaveLength(4);
      for (const r of report.rows) {
        const e = expected.get(r.user)!;
        expect([r.requests, r.prompt_tokens, r.completion_tokens]).toEqual([e.requests, e.prompt, e.completion]);
        expect(r.cost_usd).toBeCloseTo(e.cost, 9);
        expect(r.cost_usd).toBeGreaterThan(0);
      }
      // Dearest first; the CSV says the same.
      expect(report.rows.map((r) => r.cost_usd)).toEqual([...report.rows.map((r) => r.cost_usd)].sort((x, y) => y - x));
      const csv = d.sluice("usage", "report", "--account", account, "--by", "user", "--since", new Date(Date.now() - 86_400_000).toISOString().slice(0, 10), "--format", "csv").trim().split("\r\n");
      expect(csv[0]).toBe("user,requests,prompt_tokens,cached_tokens,completion_tokens,reasoning_tokens,cost_usd");
      expect(csv.slice(1).map((l) => l.split(",")[0]).sort()).toEqual(["", "alice", "bob", "carol"]);
      // By key and by model sum to the same total.
      const total = (by: string) => (JSON.parse(d.sluice("usage", "report", "--account", account, "--by", by, "--format", "json")) as { rows: { requests: number; cost_usd: number }[] }).rows.reduce((t, r) => t + r.cost_usd, 0);
      for (const by of ["key", "model", "day"]) expect(total(by)).toBeCloseTo(total("user"), 9);
      expect(d.sluice("usage", "report", "--account", account, "--by", "key")).toContain((await keyInfo(account)).id);

      // A budget per end user: alice and bob each get what it allows, and not one request more.
      d.sluice("accounts", "set", account, "--user-budget-usd", "0.1", "--user-budget-period", "day");
      let refused: { error: { code: string; message: string } } | null = null;
      for (let i = 0; i < 6 && !refused; i++) {
        const r = await chat(d.nodes[i % 2]!, key, { user: "dave", max_tokens: 4 });
        if (r.status === 429) refused = (await r.json()) as typeof refused;
        else {
          expect(r.status).toBe(200);
          await r.body?.cancel();
        }
      }
      expect(refused!.error.code).toBe("insufficient_quota");
      expect(refused!.error.message).toContain("the budget per end user of this account of $0.1 per UTC day");
      const dave = (await d.store.usage.list(a.id)).filter((r) => r.user === "dave").reduce((t, r) => t + r.costUsd, 0);
      expect(dave).toBeGreaterThan(0);
      expect(dave).toBeLessThanOrEqual(0.1);
      // Another end user, and requests naming none, are not held by dave's spend.
      expect((await chat(d.nodes[1]!, key, { user: "erin", max_tokens: 4 })).status).toBe(200);
      expect((await chat(d.nodes[0]!, key, { max_tokens: 4 })).status).toBe(200);
      // Bad input is refused, saying why.
      const bad = [
        [["usage", "report", "--account", account, "--by", "week"], "--by must be key, model, user or day"],
        [["usage", "report", "--account", account, "--by", "user", "--since", "last tuesday"], "--since \"last tuesday\": give a date"],
        [["usage", "report", "--account", account, "--by", "user", "--format", "xml"], "--format must be table, csv or json"],
        [["usage", "report", "--account", "nobody", "--by", "user"], "no account named nobody"],
        [["accounts", "set", account, "--user-budget-usd", "zero"], "a budget is a positive amount of USD"],
      ] as const;
      for (const [argv, message] of bad) {
        const r = d.sluiceRaw(...argv);
        expect(r.code).toBe(2);
        expect(r.stderr).toContain(message);
      }
      for (const m of [A_MODEL, B_MODEL]) d.sluice("models", "price", m, "--input", "0", "--output", "0");
    }, 90_000);

    test("every change of the CLI is in the audit log; audit verify passes, then fails after a row is altered in the database", async () => {
      const { account } = keyWith("--label", "audited", "--budget-usd", "3");
      d.sluice("billing", "topup", account, "--usd", "1.5");
      const entries = JSON.parse(d.sluice("audit", "list", "--format", "json", "--since", "1h")) as { seq: number; actorKind: string; source: string; action: string; target: string; before: unknown; after: Record<string, unknown> }[];
      const mine = entries.filter((e) => e.target === `account:${account}` || (e.after?.account === account));
      expect(mine.map((e) => e.action).reverse()).toEqual(["accounts.create", "billing.setPlan", "keys.create", "billing.topUp"]);
      for (const e of mine) {
        expect(e.actorKind).toBe("cli");
        expect(e.source).toStartWith("cli@");
      }
      const topUp = mine[0]!;
      expect(topUp.before).toEqual({ balance_usd: 0 });
      expect(topUp.after).toMatchObject({ balance_usd: 1.5, top_up_usd: 1.5 });
      // No secret: the key's display prefix, never the key.
      const created = mine.find((e) => e.action === "keys.create")!;
      expect(JSON.stringify(created)).not.toMatch(/sk-sluice-[0-9A-Za-z]{20,}/);
      expect(created.after).toMatchObject({ label: "audited", budget_usd: 3, budget_period: "total" });

      const ok = d.sluiceRaw("audit", "verify");
      expect(ok.code).toBe(0);
      expect(ok.stdout).toContain("audit log intact");
      // The table refuses changes through SQL...
      await expect(d.raw(`UPDATE audit_log SET actor = 'someone-else' WHERE seq = ${topUp.seq}`)).rejects.toThrow(/append-only/);
      await expect(d.raw(`DELETE FROM audit_log WHERE seq = ${topUp.seq}`)).rejects.toThrow(/append-only/);
      expect(d.sluiceRaw("audit", "verify").code).toBe(0);
      // ...and whoever drops the guard and alters a row is found out.
      await d.raw(kind.name.startsWith("sqlite") ? "DROP TRIGGER audit_log_no_update" : "DROP TRIGGER audit_log_append_only ON audit_log");
      await d.raw(`UPDATE audit_log SET after = '{"balance_usd":1000,"top_up_usd":1000}' WHERE seq = ${topUp.seq}`);
      const bad = d.sluiceRaw("audit", "verify");
      expect(bad.code).toBe(1);
      expect(bad.stderr).toContain(`audit log TAMPERED: row ${topUp.seq} was altered`);
    }, 60_000);

    test("bad key options are refused, saying why, and change nothing", async () => {
      const { account } = keyWith();
      const before = d.store.keys.list((await d.store.accounts.get(account))!.id);
      const cases: [string[], string][] = [
        [["--budget-usd", "-3"], "a budget is a positive amount of USD"],
        [["--budget-usd", "5", "--budget-period", "week"], "a budget period is day, month or total"],
        [["--budget-period", "day"], "a budget period needs a budget"],
        [["--expires", "2001-01-01"], "is in the past"],
        [["--expires", "soon"], "give a duration (90s, 30m, 12h, 30d, 2w)"],
        [["--models", "no/such-model"], "no model no/such-model in the catalog"],
        [["--models", ","], "give the models as ID,ID…"],
      ];
      for (const [opts, message] of cases) {
        const r = d.sluiceRaw("keys", "create", "--account", account, ...opts);
        expect(r.code).toBe(2);
        expect(r.stderr).toContain(message);
      }
      expect((await d.store.keys.list((await d.store.accounts.get(account))!.id)).length).toBe((await before).length);
      const r = d.sluiceRaw("keys", "update", "key_nosuchkey", "--label", "x");
      expect(r.code).toBe(2);
      expect(r.stderr).toContain("no key key_nosuchkey");
    });
  });
}
