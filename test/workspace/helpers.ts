// A signed-in workspace client over fetch: keeps cookies, reads the CSRF token from /api/me.
import type { Store } from "../../src/store/index.ts";

export const PASSWORD = "correct horse battery";

export class WorkspaceClient {
  private jar = new Map<string, string>();
  csrf = "";
  constructor(readonly base: string) {}

  private keep(res: Response) {
    for (const c of res.headers.getSetCookie()) {
      const [pair, ...attrs] = c.split(";");
      const i = pair!.indexOf("=");
      const name = pair!.slice(0, i).trim();
      const value = pair!.slice(i + 1).trim();
      if (attrs.some((a) => /max-age=0/i.test(a.trim())) || value === "") this.jar.delete(name);
      else this.jar.set(name, value);
    }
  }

  cookie(name: string) {
    return this.jar.get(name);
  }

  async request(path: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    if (this.jar.size) headers.set("cookie", [...this.jar].map(([k, v]) => `${k}=${v}`).join("; "));
    const res = await fetch(new URL(path, this.base), { ...init, headers, redirect: "manual" });
    this.keep(res);
    return res;
  }

  get = (path: string) => this.request(path);

  /** A form's answer is a 303: the page it leads to, which shows what the form had to say (once). */
  async follow(res: Response): Promise<Response> {
    if (res.status !== 303) throw new Error(`expected a 303 redirect, got ${res.status}: ${(await res.text()).slice(0, 300)}`);
    return this.get(res.headers.get("location")!);
  }

  form(path: string, fields: Record<string, string | string[]>, withCsrf = true): Promise<Response> {
    const body = new URLSearchParams();
    for (const [k, v] of Object.entries(fields)) for (const x of Array.isArray(v) ? v : [v]) body.append(k, x);
    if (withCsrf && !("_csrf" in fields)) body.set("_csrf", this.csrf);
    return this.request(path, { method: "POST", body, headers: { "content-type": "application/x-www-form-urlencoded" } });
  }

  postJson(path: string, body: unknown, withCsrf = true): Promise<Response> {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (withCsrf) headers["x-csrf-token"] = this.csrf;
    return this.request(path, { method: "POST", body: JSON.stringify(body), headers });
  }

  /** Signs in through the real form (with its double-submit token); returns the POST's response. */
  async signIn(email: string, password: string): Promise<Response> {
    const page = await this.get("/workspace/signin");
    const html = await page.text();
    const token = /name="_csrf" value="([^"]+)"/.exec(html)![1]!;
    const res = await this.form("/workspace/signin", { email, password, _csrf: token });
    // Failures are redirected back to the form (with the error); success goes to the keys.
    if (res.status === 303 && res.headers.get("location") === "/workspace/keys") {
      const me = (await (await this.get("/workspace/api/me")).json()) as { csrf_token: string };
      this.csrf = me.csrf_token;
    }
    return res;
  }
}

/** An account with a member user (and optionally credit) for tests. */
export async function makeAccount(store: Store, name: string, opts: { usd?: number; plan?: "prepaid" | "unlimited"; role?: "member" | "operator" } = {}) {
  const account = await store.accounts.create(name);
  if (opts.plan) (await store.billing.setPlan(account.id, opts.plan));
  if (opts.usd) (await store.billing.topUp(account.id, opts.usd, "test credit"));
  const user = await store.users.create({ accountId: account.id, email: `${name}@example.com`, password: PASSWORD, role: opts.role });
  return { account, user, email: user.email };
}
