// A store whose changes are written to the audit log, each in one transaction with its entry: who
// (the actor given), what, the target, its state before and after. Reads pass through untouched.
// The CLI, the workspace and the admin API each hand their writes to such a store, so no path that
// changes keys, limits, prices, credit, plans, access, accounts, users or tokens goes unrecorded.
import type { AdminToken, ApiKeyInfo, AuditActor, Store, StoreTables, User } from "./types.ts";

/** A key as the log shows it: never the key itself (only its display prefix is kept anywhere). */
const keyState = (k: ApiKeyInfo | null) =>
  k && {
    id: k.id,
    account: k.accountName,
    label: k.label,
    prefix: k.prefix,
    budget_usd: k.budgetUsd,
    budget_period: k.budgetPeriod,
    expires_at: k.expiresAt,
    models: k.models,
    revoked_at: k.revokedAt,
  };

const userState = (u: User | null) => u && { email: u.email, account: u.accountName, role: u.role };
const tokenState = (t: AdminToken | null) => t && { id: t.id, label: t.label, prefix: t.prefix, revoked_at: t.revokedAt };

async function accountState(t: StoreTables, id: number) {
  const a = await t.accounts.getById(id);
  return a && { name: a.name, priority: a.priority, model_access: a.modelAccess, user_budget_usd: a.userBudgetUsd, user_budget_period: a.userBudgetPeriod };
}

const accountTarget = async (t: StoreTables, id: number) => `account:${(await t.accounts.getById(id))?.name ?? id}`;

async function modelState(t: StoreTables, id: string) {
  const m = await t.catalog.get(id);
  return (
    m && {
      status: m.status,
      input_per_mtok: m.inputPricePerMTok,
      cached_input_per_mtok: m.cachedInputPricePerMTok,
      output_per_mtok: m.outputPricePerMTok,
      keep_alive_seconds: m.keepAliveSeconds,
    }
  );
}

async function accessState(t: StoreTables, accountId: number) {
  const a = await t.accounts.getById(accountId);
  return a && { model_access: a.modelAccess, grants: a.modelAccess === "listed" ? await t.catalog.grants(accountId) : null };
}

type Args = any[];
interface Spec {
  /** The entry's target, from the call's arguments (read before the change). */
  target(t: StoreTables, a: Args): Promise<string | null> | string | null;
  before?(t: StoreTables, a: Args): Promise<unknown> | unknown;
  after(t: StoreTables, a: Args, result: any): Promise<unknown> | unknown;
  /** The target when it is known only once the change is made (a new key, account or token). */
  targetAfter?(result: any): string;
}

const limitsTarget = async (t: StoreTables, a: Args) =>
  `${a[1] ? `key:${a[1]}` : await accountTarget(t, a[0])}${a[3] ? ` model:${a[3]}` : ""}`;

// Family → method → how its entry reads. A method not listed here does not change what is audited
// (reads, usage, the catalog's own synchronisation, sessions, rate counters).
const AUDITED: { [F in keyof StoreTables]?: Record<string, Spec> } = {
  accounts: {
    create: { target: (_, a) => `account:${a[0]}`, after: (t, _a, r) => accountState(t, r.id) },
    setPriority: { target: (t, a) => accountTarget(t, a[0]), before: (t, a) => accountState(t, a[0]), after: (t, a) => accountState(t, a[0]) },
    setUserBudget: { target: (t, a) => accountTarget(t, a[0]), before: (t, a) => accountState(t, a[0]), after: (t, a) => accountState(t, a[0]) },
  },
  keys: {
    create: { target: () => null, targetAfter: (r) => `key:${r.info.id}`, after: (_t, _a, r) => keyState(r.info) },
    update: { target: (_, a) => `key:${a[0]}`, before: async (t, a) => keyState(await t.keys.get(a[0])), after: async (t, a) => keyState(await t.keys.get(a[0])) },
    revoke: { target: (_, a) => `key:${a[0]}`, before: async (t, a) => keyState(await t.keys.get(a[0])), after: async (t, a) => keyState(await t.keys.get(a[0])) },
  },
  catalog: Object.fromEntries(
    [
      ...["setStatus", "setKeepAlive", "setPrices"].map((m): [string, Spec] => [
        m,
        { target: (_, a) => `model:${a[0]}`, before: (t, a) => modelState(t, a[0]), after: (t, a) => modelState(t, a[0]) },
      ]),
      ...["grant", "revoke"].map((m): [string, Spec] => [
        m,
        { target: async (t, a) => `${await accountTarget(t, a[0])} model:${a[1]}`, before: (t, a) => accessState(t, a[0]), after: (t, a) => accessState(t, a[0]) },
      ]),
      ["allowAll", { target: (t, a) => accountTarget(t, a[0]), before: (t, a) => accessState(t, a[0]), after: (t, a) => accessState(t, a[0]) }],
    ] as [string, Spec][],
  ),
  billing: {
    setPlan: { target: (t, a) => accountTarget(t, a[0]), before: async (t, a) => ({ plan: await t.billing.plan(a[0]) }), after: async (t, a) => ({ plan: await t.billing.plan(a[0]) }) },
    topUp: {
      target: (t, a) => accountTarget(t, a[0]),
      before: async (t, a) => ({ balance_usd: await t.billing.balanceUsd(a[0]) }),
      after: async (t, a) => ({ balance_usd: await t.billing.balanceUsd(a[0]), top_up_usd: a[1], note: a[2] }),
    },
  },
  limits: {
    set: { target: limitsTarget, before: (t, a) => t.limits.get(a[0], a[1], a[3]), after: (t, a) => t.limits.get(a[0], a[1], a[3]) },
  },
  users: {
    // The password is never in the log: only that it was set.
    create: { target: (_, a) => `user:${a[0].email}`, after: (_t, _a, r) => userState(r) },
    setPassword: { target: async (t, a) => `user:${(await t.users.get(a[0]))?.email ?? a[0]}`, after: () => ({ password: "changed" }) },
    setRole: { target: async (t, a) => `user:${(await t.users.get(a[0]))?.email ?? a[0]}`, before: async (t, a) => userState(await t.users.get(a[0])), after: async (t, a) => userState(await t.users.get(a[0])) },
    remove: { target: async (t, a) => `user:${(await t.users.get(a[0]))?.email ?? a[0]}`, before: async (t, a) => userState(await t.users.get(a[0])), after: () => null },
  },
  adminTokens: {
    create: { target: () => null, targetAfter: (r) => `admin_token:${r.info.id}`, after: (_t, _a, r) => tokenState(r.info) },
    revoke: { target: (_, a) => `admin_token:${a[0]}`, before: async (t, a) => tokenState(await t.adminTokens.get(a[0])), after: async (t, a) => tokenState(await t.adminTokens.get(a[0])) },
  },
};

/**
 * The store with every change it makes recorded as `actor`'s. A change that changes nothing (a
 * revocation of a revoked key, an unknown id: the method answers false or null) leaves no entry.
 */
export function auditedStore(store: Store, actor: AuditActor): Store {
  const out: Store = { ...store };
  for (const family of Object.keys(AUDITED) as (keyof StoreTables)[]) {
    const specs = AUDITED[family]!;
    const part = { ...(store[family] as object) } as Record<string, unknown>;
    for (const [method, spec] of Object.entries(specs)) {
      part[method] = (...args: Args) =>
        store.atomically(async (t) => {
          const target = await spec.target(t, args);
          const before = spec.before ? await spec.before(t, args) : null;
          const result = await ((t[family] as unknown as Record<string, (...a: Args) => Promise<unknown>>)[method]!)(...args);
          if (result === false || result === null) return result;
          await t.audit.append({ actor, action: `${family}.${method}`, target: spec.targetAfter ? spec.targetAfter(result) : target, before, after: await spec.after(t, args, result) });
          return result;
        });
    }
    (out as unknown as Record<string, unknown>)[family] = part;
  }
  return out;
}

/** Records an action that is not a change of the store (a model loaded or unloaded) in the audit log. */
export function recordAction(store: Store, actor: AuditActor, action: string, target: string | null, before: unknown, after: unknown) {
  return store.audit.append({ actor, action, target, before, after });
}
