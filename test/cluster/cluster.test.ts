// Two real node processes on one real PostgreSQL, each serving a different model: both list both,
// a request for the other's model is forwarded (whole and streamed, the same text as served
// there), revocation and restriction from the CLI reach both within a second, a per-minute limit
// and prepaid credit hold across both, PostgreSQL restarted under load gives 503s and recovers,
// and a node killed under load loses no completed usage row and leaves the lists.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { openPostgresStore, type Store } from "../../src/store/index.ts";
import { startCluster, type ClusterNode, type TestCluster } from "../helpers/cluster.ts";
import { postgresMissing } from "../helpers/postgres.ts";
import { BUN, REPO } from "../helpers/paths.ts";
import { PASSWORD, WorkspaceClient } from "../workspace/helpers.ts";
import { join } from "node:path";

const A_MODEL = "cluster/a-1.0";
const B_MODEL = "cluster/b-1.0";

let c: TestCluster;
let a: ClusterNode;
let b: ClusterNode;
let store: Store;

describe.skipIf(postgresMissing !== null)("two nodes on one PostgreSQL", () => {
  beforeAll(async () => {
    c = await startCluster([
      { models: { "cluster-a": { preset: "tiny-bytes", seed: 31, id: A_MODEL } } },
      { models: { "cluster-b": { preset: "tiny-bytes", seed: 32, id: B_MODEL } } },
    ]);
    [a, b] = c.nodes as [ClusterNode, ClusterNode];
    store = await openPostgresStore(c.database);
  }, 120_000);
  afterAll(async () => {
    await store?.close();
    await c?.stop();
  });

  const auth = (key = c.key) => ({ authorization: `Bearer ${key}`, "content-type": "application/json" });
  const models = (node: ClusterNode, key = c.key) => fetch(`${node.url}/v1/models`, { headers: auth(key) });
  const listed = async (node: ClusterNode, key = c.key) => ((await (await models(node, key)).json()) as { data: { id: string }[] }).data.map((m) => m.id);
  const chat = (node: ClusterNode, body: Record<string, unknown>, key = c.key, headers: Record<string, string> = {}) =>
    fetch(`${node.url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...auth(key), ...headers },
      body: JSON.stringify({ messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 12, temperature: 0, ...body }),
      signal: AbortSignal.timeout(20_000),
    });
  /** A new account with a key, made through the CLI like an operator would (unlimited unless prepaid). */
  const account = (name: string, plan: "prepaid" | "unlimited" = "unlimited") => {
    c.sluice("accounts", "create", name);
    c.sluice("billing", "plan", name, plan);
    return c.sluice("keys", "create", "--account", name).trim();
  };
  /** Polls until fn is true; the milliseconds it took. */
  const within = async (fn: () => Promise<boolean>, limitMs: number) => {
    const t0 = performance.now();
    while (!(await fn())) {
      if (performance.now() - t0 > limitMs) throw new Error(`not within ${limitMs} ms`);
      await Bun.sleep(10);
    }
    return performance.now() - t0;
  };

  test("serve refuses --database without --cluster-secret, saying why", () => {
    const p = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), "serve", "--database", c.database, "--port", "0"], { stdout: "pipe", stderr: "pipe", env: { ...process.env, SLUICE_CLUSTER_SECRET: "" } });
    expect(p.exitCode).toBe(2);
    expect(p.stderr.toString()).toContain("--cluster-secret (or SLUICE_CLUSTER_SECRET) is required with --database");
  });

  test("the second node's banner names the shared database, and its command runs as printed", async () => {
    const line = b.banner.split("\n").find((l) => l.includes("keys create"))!.trim();
    expect(line).toEndWith(`keys create --account local --database "$SLUICE_DATABASE"`);
    const p = Bun.spawnSync(["/bin/sh", "-c", line], { cwd: REPO, stdout: "pipe", stderr: "pipe", env: { ...process.env, SLUICE_DATABASE: c.database } });
    expect(p.exitCode).toBe(0);
    expect(p.stdout.toString().trim()).toMatch(/^sk-sluice-\w+$/);
  });

  test("each node lists the models of both, in /v1/models and /v1/integrations", async () => {
    for (const node of [a, b]) {
      expect(await listed(node)).toEqual([A_MODEL, B_MODEL]);
      const integ = (await (await fetch(`${node.url}/v1/integrations`)).json()) as { models: string[] };
      expect(integ.models).toEqual([A_MODEL, B_MODEL]);
    }
  });

  test("sluice doctor reports the database and the live nodes; the admin page shows the nodes and their models", async () => {
    const live = await store.nodes.live();
    expect(live.map((n) => n.models.map((m) => m.id))).toEqual(expect.arrayContaining([[A_MODEL], [B_MODEL]]));
    const doctor = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), "doctor", "--device", "cpu", "--models", a.modelsDir, "--data", a.dataDir], {
      stdout: "pipe",
      stderr: "pipe",
      env: { ...process.env, SLUICE_DATABASE: c.database },
    });
    const out = doctor.stdout.toString();
    expect(doctor.exitCode).toBe(0);
    expect(out).toMatch(/database: postgres:\/\/\S+ \(PostgreSQL \d+[^;]*; schema version \d+ of \d+\)/);
    expect(out).toContain("live nodes: 2");
    for (const n of live) expect(out).toContain(`${n.id} at ${n.url}`);
    expect(out).toContain(`${B_MODEL} (queue 0)`);
    // An operator signs in on node A and sees both nodes with their models.
    const made = Bun.spawnSync([BUN, join(REPO, "src/cli/main.ts"), "users", "create", "ops@example.com", "--account", "local", "--operator"], {
      stdout: "pipe",
      stderr: "pipe",
      env: { ...process.env, SLUICE_DATABASE: c.database, SLUICE_PASSWORD: PASSWORD },
    });
    expect(made.exitCode).toBe(0);
    const ws = new WorkspaceClient(a.url);
    expect((await ws.signIn("ops@example.com", PASSWORD)).status).toBe(303);
    const page = await (await ws.get("/workspace/admin")).text();
    for (const n of live) {
      expect(page).toContain(`data-node-id="${n.id}"`);
      expect(page).toContain(n.url);
    }
    expect(page).toContain(`<code>${A_MODEL}</code> (0)`);
    expect(page).toContain(`<code>${B_MODEL}</code> (0)`);
  }, 30_000);

  test("a request for the other node's model is forwarded: the same answer, whole and streamed, recorded once", async () => {
    const local = (await (await chat(b, { model: B_MODEL })).json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number; completion_tokens: number } };
    // The token counts (how many prompt tokens the prefix cache served differs between runs).
    const counts = { prompt_tokens: local.usage.prompt_tokens, completion_tokens: local.usage.completion_tokens };
    const viaA = await chat(a, { model: B_MODEL }, c.key, { "x-request-id": "fwd-whole-1" });
    expect(viaA.status).toBe(200);
    expect(viaA.headers.get("x-request-id")).toBe("fwd-whole-1");
    const whole = (await viaA.json()) as { id: string; model: string; choices: { message: { content: string } }[]; usage: unknown };
    expect(whole.id).toBe("chatcmpl-fwd-whole-1");
    expect(whole.model).toBe(B_MODEL);
    expect(whole.choices[0]!.message.content).toBe(local.choices[0]!.message.content);
    expect(whole.usage).toMatchObject(counts);
    // Streamed through the official client: the deltas make the same text.
    const client = new OpenAI({ apiKey: c.key, baseURL: `${a.url}/v1`, maxRetries: 0 });
    const stream = await client.chat.completions.create({ model: B_MODEL, messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } });
    let text = "";
    let usage: unknown = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(local.choices[0]!.message.content);
    expect(usage).toMatchObject(counts);
    // Counted and billed once: one usage row, one charge, written by the node that ran it.
    const localId = (await store.accounts.get("local"))!.id;
    const rows = (await store.usage.list(localId, { limit: 1000 })).filter((r) => r.requestId === "fwd-whole-1");
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ modelId: B_MODEL, status: "ok", completionTokens: 12 });
    expect((await store.billing.history(localId, { limit: 1000 })).filter((e) => e.requestId === "fwd-whole-1")).toHaveLength(1);
    // Refused by the node that would run it (a prompt longer than the model's context): its error
    // comes back as it is, and the request leaves nothing in flight and no usage row.
    const refused = await chat(a, { model: B_MODEL, messages: [{ role: "user", content: "x".repeat(20_000) }] }, c.key, { "x-request-id": "fwd-refused-1" });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: { type: string } }).error.type).toBe("invalid_request_error");
    expect(await store.inflight.list()).toEqual([]);
    expect((await store.usage.list(localId, { limit: 1000 })).filter((r) => r.requestId === "fwd-refused-1")).toEqual([]);
  });

  test("a request that claims to come from a node without the secret is refused", async () => {
    const res = await fetch(`${b.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-sluice-hop": `v1.${Date.now()}.${"0".repeat(64)}`, "x-sluice-hop-account": "1", "x-sluice-hop-inflight": "inf_x", "x-request-id": "forged" },
      body: JSON.stringify({ model: B_MODEL, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("invalid_hop");
  });

  test("a key revoked from the CLI fails on both nodes within a second", async () => {
    const key = account("revokes");
    for (const node of [a, b]) for (let i = 0; i < 3; i++) expect((await models(node, key)).status).toBe(200); // cached now
    const id = (JSON.parse(c.sluice("keys", "list", "--account", "revokes", "--json")) as { id: string }[])[0]!.id;
    c.sluice("keys", "revoke", id);
    for (const node of [a, b]) {
      const ms = await within(async () => (await models(node, key)).status === 401, 1000);
      expect(ms).toBeLessThan(1000);
    }
    expect((await models(a)).status).toBe(200);
  });

  test("an account restricted from the CLI loses the model on both nodes within a second", async () => {
    const key = account("restricted");
    for (const node of [a, b]) expect(await listed(node, key)).toEqual([A_MODEL, B_MODEL]);
    c.sluice("models", "revoke", B_MODEL, "--account", "restricted");
    for (const node of [a, b]) await within(async () => (await listed(node, key)).join() === A_MODEL, 1000);
    expect((await chat(a, { model: B_MODEL }, key)).status).toBe(404);
  });

  test("a per-minute limit admits that many requests in total across both nodes", async () => {
    const key = account("limited");
    c.sluice("limits", "set", "--account", "limited", "--rpm", "6");
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) {
      const node = i % 2 === 0 ? a : b;
      // Chats for either model on either node, and model lists, all count.
      const res = i % 3 === 0 ? await models(node, key) : await chat(node, { model: i % 4 < 2 ? A_MODEL : B_MODEL, max_tokens: 1 }, key);
      statuses.push(res.status);
      await res.arrayBuffer();
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(6);
    expect(statuses.filter((s) => s === 429)).toHaveLength(4);
  });

  test("a prepaid account hammered on both nodes overspends by less than one request's reservation", async () => {
    const key = account("prepaid", "prepaid");
    c.sluice("models", "price", A_MODEL, "--input", "1000", "--output", "1000");
    c.sluice("models", "price", B_MODEL, "--input", "1000", "--output", "1000");
    c.sluice("billing", "topup", "prepaid", "--usd", "0.3");
    const id = (await store.accounts.get("prepaid"))!.id;
    let reservedMax = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        for (const r of await store.inflight.list(id)) reservedMax = Math.max(reservedMax, r.reservedUsd);
        await Bun.sleep(5);
      }
    })();
    const outcomes: number[] = [];
    const client = async (node: ClusterNode, model: string) => {
      for (;;) {
        const res = await chat(node, { model, max_tokens: 8, messages: [{ role: "user", content: "hi" }] }, key);
        outcomes.push(res.status);
        const body = (await res.json()) as { error?: { code: string } };
        if (res.status === 429) {
          expect(body.error?.code).toBe("insufficient_quota");
          return;
        }
        expect(res.status).toBe(200);
      }
    };
    // Four clients per node, half of them for the other node's model (forwarded).
    await Promise.all([a, b].flatMap((node) => [client(node, A_MODEL), client(node, B_MODEL), client(node, A_MODEL), client(node, B_MODEL)]));
    sampling = false;
    await sampler;
    expect(outcomes.filter((s) => s === 200).length).toBeGreaterThan(3);
    expect(await store.inflight.list(id)).toEqual([]);
    const balance = await store.billing.balanceUsd(id);
    expect(reservedMax).toBeGreaterThan(0);
    // Every reservation covers its request, and a request is admitted only while the balance
    // covers all reservations in flight: the balance ends above minus one reservation.
    expect(balance).toBeGreaterThan(-reservedMax);
    const spent = (await store.billing.summary(id, 0)).spendUsd;
    expect(spent).toBeGreaterThan(0.2);
  }, 60_000);

  test("PostgreSQL restarted under load: 503 with Retry-After while it is down, recovery by itself", async () => {
    const fresh = account("outage");
    for (const node of [a, b]) expect((await chat(node, { model: A_MODEL, max_tokens: 2 }, fresh)).status).toBe(200);
    // Load on both nodes for both models (local and forwarded) through the outage.
    const seen: { status: number; ms: number; at: number }[] = [];
    let stop = false;
    const worker = async (node: ClusterNode, model: string) => {
      while (!stop) {
        const t0 = performance.now();
        let status = 0;
        try {
          const res = await chat(node, { model, max_tokens: 4 }, fresh);
          status = res.status;
          if (status === 503) expect(res.headers.get("retry-after")).toBe("1");
          await res.arrayBuffer();
        } catch {
          status = -1;
        }
        seen.push({ status, ms: performance.now() - t0, at: performance.now() });
        if (status !== 200) await Bun.sleep(20);
      }
    };
    const workers = [worker(a, A_MODEL), worker(a, B_MODEL), worker(b, A_MODEL), worker(b, B_MODEL)];
    await Bun.sleep(300);
    c.pg.stop();
    const down = performance.now();
    let up = Infinity;
    try {
      for (const node of [a, b]) {
        // Chats reach the database (admission), and cached answers stop once the signal sees it gone.
        await within(async () => {
          const res = await chat(node, { model: A_MODEL, max_tokens: 2 }, fresh);
          if (res.status !== 503) return false;
          expect(((await res.json()) as { error: { code: string } }).error.code).toBe("database_unavailable");
          return true;
        }, 10_000);
        await within(async () => (await models(node, fresh)).status === 503, 5_000);
      }
    } finally {
      c.pg.start();
      up = performance.now();
    }
    for (const node of [a, b]) {
      await within(async () => (await chat(node, { model: B_MODEL, max_tokens: 2 }, fresh)).status === 200, 15_000);
      expect((await models(node, fresh)).status).toBe(200);
    }
    await Bun.sleep(300);
    stop = true;
    await Promise.all(workers);
    // Every answer was a success or an explicit 503, none hung, and the load succeeds again after.
    expect(seen.filter((s) => s.status !== 200 && s.status !== 503)).toEqual([]);
    expect(Math.max(...seen.map((s) => s.ms))).toBeLessThan(10_000);
    expect(seen.some((s) => s.status === 503 && s.at > down)).toBe(true);
    expect(seen.filter((s) => s.at > up + 2_000 && s.status !== 200)).toEqual([]);
    expect(seen.filter((s) => s.at > up && s.status === 200).length).toBeGreaterThan(0);
    // What ran across the outage is recorded once the database is back: nothing stays in flight.
    const outage = (await store.accounts.get("outage"))!.id;
    await within(async () => (await store.inflight.list(outage)).length === 0, 5_000);
  }, 60_000);

  test("SIGKILL of a node under load: no completed usage row lost, its requests in flight interrupted, its models gone", async () => {
    const completed: string[] = [];
    /** Through A: how long each request took, and how those caught by the kill ended. */
    let slowest = 0;
    const caught: string[] = [];
    let n = 0;
    let stop = false;
    const worker = async (node: ClusterNode, stream: boolean) => {
      while (!stop) {
        const id = `kill-${node === a ? "a" : "b"}-${n++}`;
        const t0 = performance.now();
        try {
          const res = await chat(node, { model: B_MODEL, max_tokens: 24, stream }, c.key, { "x-request-id": id });
          const text = await res.text();
          if (res.status === 200 && (!stream || text.includes("data: [DONE]"))) completed.push(id);
          else if (node === a) caught.push(res.status === 200 ? (JSON.parse(text.trim().split("\n\n").pop()!.slice(6)) as { error: { code: string } }).error.code : String(res.status));
        } catch (e) {
          if (node === b) return; // the node is gone
          caught.push(String(e));
        }
        if (node === a) slowest = Math.max(slowest, performance.now() - t0);
      }
    };
    // B's model, asked of B directly and through A (forwarded), whole and streamed.
    const workers = [worker(b, false), worker(b, true), worker(a, false), worker(a, true)];
    await Bun.sleep(1500);
    b.proc.kill("SIGKILL");
    await b.proc.exited;
    await Bun.sleep(300);
    stop = true;
    await Promise.all(workers);
    expect(completed.length).toBeGreaterThan(5);
    // No forward hung on the dead node: each ended in an explicit answer (503 or, mid-stream, an
    // error event; or, once B was gone from the lists, 404), well inside the client's timeout.
    expect(slowest).toBeLessThan(10_000);
    for (const how of caught) expect(["503", "node_unavailable", "404"]).toContain(how);
    // The dead node's models leave the list once its heartbeat expires (1.5 s here).
    await within(async () => (await listed(a)).join() === A_MODEL, 5_000);
    // Its requests in flight were recorded as interrupted by the live node's sweep.
    await within(async () => (await store.inflight.list()).length === 0, 5_000);
    const localId = (await store.accounts.get("local"))!.id;
    const rows = (await store.usage.list(localId, { limit: 100_000 })).filter((r) => r.requestId.startsWith("kill-"));
    const byId = new Map<string, number>();
    for (const r of rows) byId.set(r.requestId, (byId.get(r.requestId) ?? 0) + 1);
    expect(completed.filter((id) => !byId.has(id))).toEqual([]);
    // Never recorded (or billed) twice.
    expect([...byId.values()].filter((count) => count > 1)).toEqual([]);
    const charges = (await store.billing.history(localId, { limit: 100_000 })).filter((e) => e.requestId?.startsWith("kill-"));
    expect(new Set(charges.map((e) => e.requestId)).size).toBe(charges.length);
    const unfinished = rows.filter((r) => !completed.includes(r.requestId));
    for (const r of unfinished) expect(["interrupted", "cancelled", "ok"]).toContain(r.status);
    expect(unfinished.some((r) => r.status === "interrupted")).toBe(true);
    // A request for the dead node's model is a clean 404 now, not a hang.
    expect((await chat(a, { model: B_MODEL })).status).toBe(404);
  }, 60_000);
});
