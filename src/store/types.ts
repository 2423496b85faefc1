// The store's interface: the rest of the program sees these records and operations, never SQL.
// Two implementations share it: SQLite (one file, one node) and PostgreSQL (several nodes). Every
// operation that reaches the database is asynchronous; the few that a request needs on every call
// (`keys.peek`, `limits.peekEffective`, `cacheGeneration`) answer from memory.
import type { SamplingDefaults } from "../protocol/sampling.ts";
import type { DialectName } from "./db.ts";

export interface Account {
  id: number;
  name: string;
  /** 'all': every active model; 'listed': only models granted to the account. */
  modelAccess: "all" | "listed";
  /** On a busy model, higher priorities are admitted first (and may preempt lower ones). */
  priority: number;
  createdAt: number;
  /** What one end user (a request's `user` or `safety_identifier`) may spend per period; null: no such budget. */
  userBudgetUsd: number | null;
  userBudgetPeriod: BudgetPeriod | null;
}

export interface ApiKeyInfo {
  id: string;
  accountId: number;
  accountName: string;
  /** The account's priority (see Account.priority). */
  accountPriority: number;
  prefix: string;
  label: string | null;
  createdAt: number;
  lastUsedAt: number | null;
  revokedAt: number | null;
  /** The key's own budget (USD per period), on top of its account's credit; null: none. */
  budgetUsd: number | null;
  /** The period the budget counts over; null when there is no budget. */
  budgetPeriod: BudgetPeriod | null;
  /** From then on the key is refused as expired; null: never. */
  expiresAt: number | null;
  /** The models the key may use (within its account's); null: every model its account may use. */
  models: readonly string[] | null;
}

/** A budget counts spend since the start of the UTC day, the UTC month, or ever. */
export type BudgetPeriod = "day" | "month" | "total";

/** A key's own limits, as created or changed; in an update, an absent field stays as it is. */
export interface KeyLimits {
  budgetUsd: number | null;
  budgetPeriod: BudgetPeriod | null;
  expiresAt: number | null;
  models: readonly string[] | null;
}

/**
 * A request refused at admission because a budget other than the account's credit would be
 * exceeded by its worst case: the key's own budget, or the account's budget per end user.
 */
export class BudgetExceededError extends Error {
  constructor(
    readonly scope: "key" | "user",
    readonly budgetUsd: number,
    readonly period: BudgetPeriod,
    /** Spent in the period plus what requests in flight hold. */
    readonly committedUsd: number,
    /** This request's worst case. */
    readonly requestUsd: number,
  ) {
    super(`${scope} budget of $${budgetUsd} per ${period} exceeded`);
    this.name = "BudgetExceededError";
  }
}

export interface CatalogModel {
  id: string;
  displayName: string;
  status: "active" | "inactive";
  /** The model's directory was found and loaded at the last synchronisation. */
  present: boolean;
  loadError: string | null;
  contextLength: number;
  sourceDir: string;
  inputPricePerMTok: number;
  /** Prompt tokens served from the prefix cache; null: they cost the input price. */
  cachedInputPricePerMTok: number | null;
  outputPricePerMTok: number;
  supportsImages: boolean;
  supportsTools: boolean;
  supportsStructured: boolean;
  ownedBy: string;
  /** Seconds the model stays loaded once idle (-1: always); null: its sluice.json's, else the server's. */
  keepAliveSeconds: number | null;
  /** What the model samples with where a request leaves a parameter out ({}: the API's defaults). */
  samplingDefaults: SamplingDefaults;
  /** The tool-call format its calls are parsed in (protocol/tools.ts), or null: it takes no tools. */
  toolFormat: string | null;
  createdAt: number;
}

/** What a synchronisation knows of one model directory. */
export interface DiscoveredModel {
  id: string;
  displayName: string;
  contextLength: number;
  sourceDir: string;
  supportsImages: boolean;
  supportsTools: boolean;
  supportsStructured: boolean;
  ownedBy: string;
  /** The tool-call format its calls are parsed in, or null: it takes no tools (absent: not known). */
  toolFormat?: string | null;
  /** Set when the directory could not be loaded: the entry is kept but not served. */
  loadError: string | null;
  /** The model's sampling defaults (absent or {}: the API's). */
  samplingDefaults?: SamplingDefaults;
}

export interface UsageRecord {
  requestId: string;
  accountId: number;
  keyId: string | null;
  modelId: string;
  promptTokens: number;
  completionTokens: number;
  /** Of the prompt tokens, those the prefix cache served (default 0). */
  cachedTokens?: number;
  /** Of the completion tokens, those spent thinking (default 0). */
  reasoningTokens?: number;
  latencyMs: number;
  /** 'ok', 'cancelled', 'error' … */
  status: string;
  finishReason: string | null;
  user: string | null;
  metadata: Record<string, string> | null;
  createdAt?: number;
}

export interface UsageRow extends Required<Omit<UsageRecord, "metadata">> {
  id: number;
  metadata: Record<string, string> | null;
  /** What the request was charged (0: not charged, or recorded before costs were kept per row). */
  costUsd: number;
}

export interface AccountStore {
  create(name: string): Promise<Account>;
  get(name: string): Promise<Account | null>;
  getById(id: number): Promise<Account | null>;
  list(): Promise<Account[]>;
  /** False when there is no such account. */
  setPriority(id: number, priority: number): Promise<boolean>;
  /** Sets (null: removes) the budget per end user; false when there is no such account. */
  setUserBudget(id: number, usd: number | null, period?: BudgetPeriod): Promise<boolean>;
}

export interface KeyStore {
  /** Returns the plain key once; only its hash is kept. Throws on limits that make no sense. */
  create(accountId: number, label: string | null, limits?: Partial<KeyLimits>): Promise<{ key: string; info: ApiKeyInfo }>;
  /** Changes a key's label and limits (absent fields stay); the key after, or null when there is no such key. */
  update(keyId: string, changes: Partial<KeyLimits> & { label?: string | null }, accountId?: number): Promise<ApiKeyInfo | null>;
  get(keyId: string): Promise<ApiKeyInfo | null>;
  /** What the key's requests cost since `since` (ms). */
  spendUsd(keyId: string, since: number): Promise<number>;
  /** The active (not revoked) key with this plain text, or null; an expired key is returned (the caller says it expired). */
  authenticate(plainKey: string): Promise<ApiKeyInfo | null>;
  /**
   * What `authenticate` would answer, from memory: the key, null for a text that cannot be a key,
   * undefined when the answer is not cached (then call `authenticate`).
   */
  peek(plainKey: string): ApiKeyInfo | null | undefined;
  /** Notes the key's last use (advisory: at most every 30 s per key; never rejects through the store's cache). */
  touch(keyId: string, at?: number): Promise<void>;
  list(accountId?: number): Promise<ApiKeyInfo[]>;
  /** False when there is no such key or it was already revoked. */
  revoke(keyId: string, accountId?: number): Promise<boolean>;
  count(accountId: number): Promise<number>;
}

export interface CatalogStore {
  /**
   * Upserts the discovered models. A store of one node marks the others as no longer present; a
   * store shared by several nodes leaves them (another node may serve them) and keeps a load
   * error of this node off a model that loads elsewhere.
   */
  sync(models: DiscoveredModel[]): Promise<{ added: string[]; updated: string[]; missing: string[] }>;
  get(id: string): Promise<CatalogModel | null>;
  list(): Promise<CatalogModel[]>;
  /** What the gateway serves: active, loaded, and (shared store) registered by a live node. */
  listServed(): Promise<CatalogModel[]>;
  setStatus(id: string, status: "active" | "inactive"): Promise<boolean>;
  /** Seconds to stay loaded once idle (-1: always; null: the model's or the server's default). False: no such model. */
  setKeepAlive(id: string, seconds: number | null): Promise<boolean>;
  /** `cachedInputPerMTok`: undefined leaves it as it is; null charges cached prompt tokens the input price. */
  setPrices(id: string, inputPerMTok: number, outputPerMTok: number, cachedInputPerMTok?: number | null): Promise<boolean>;
  /** Served models this account may use. */
  listForAccount(accountId: number): Promise<CatalogModel[]>;
  /** A served model this account may use, by exact id, or null. */
  getForAccount(accountId: number, id: string): Promise<CatalogModel | null>;
  grant(accountId: number, modelId: string): Promise<void>;
  revoke(accountId: number, modelId: string): Promise<void>;
  grants(accountId: number): Promise<string[]>;
  /** Lifts a restriction: the account sees every served model again, present and future. */
  allowAll(accountId: number): Promise<void>;
}

export interface UsageStore {
  record(row: UsageRecord): Promise<void>;
  list(accountId: number, opts?: { since?: number; until?: number; limit?: number }): Promise<UsageRow[]>;
  countAll(): Promise<number>;
}

export type Plan = "prepaid" | "unlimited";

export interface LedgerEntry {
  id: number;
  accountId: number;
  kind: "charge" | "topup";
  /** Signed: top-ups add, charges subtract. */
  amountUsd: number;
  requestId: string | null;
  modelId: string | null;
  promptTokens: number | null;
  /** Of the prompt tokens, those charged at the cached-input price. */
  cachedTokens: number | null;
  completionTokens: number | null;
  note: string | null;
  createdAt: number;
}

export interface ChargeInput {
  accountId: number;
  requestId: string;
  modelId: string;
  promptTokens: number;
  /** Of the prompt tokens, those the prefix cache served (default 0). */
  cachedTokens?: number;
  completionTokens: number;
  at?: number;
}

export interface BillingSummary {
  plan: Plan;
  balanceUsd: number;
  /** Charges in [since, until), as a positive amount. */
  spendUsd: number;
  topUpsUsd: number;
}

export interface BillingStore {
  plan(accountId: number): Promise<Plan>;
  setPlan(accountId: number, plan: Plan): Promise<void>;
  balanceUsd(accountId: number): Promise<number>;
  /** Unlimited plans always; prepaid ones while the balance, less the credit reserved by requests in flight, is positive. */
  hasCredit(accountId: number): Promise<boolean>;
  /** Charges a finished request at the model's current prices; the entry, or null for an unknown model. */
  charge(c: ChargeInput): Promise<LedgerEntry | null>;
  topUp(accountId: number, usd: number, note: string | null): Promise<LedgerEntry>;
  history(accountId: number, opts?: { since?: number; until?: number; limit?: number }): Promise<LedgerEntry[]>;
  summary(accountId: number, since: number, until?: number): Promise<BillingSummary>;
}

/** A chat request admitted and not yet recorded, with the credit reserved for it. */
export interface InflightRequest {
  id: string;
  requestId: string;
  accountId: number;
  keyId: string | null;
  modelId: string;
  /** The node that generates it. */
  nodeId: string;
  reservedUsd: number;
  startedAt: number;
}

export interface AdmitInput {
  requestId: string;
  accountId: number;
  keyId: string | null;
  modelId: string;
  nodeId: string;
  /** Worst case of the request, priced at the model's prices for the reservation. */
  promptTokens: number;
  completionTokens: number;
  /** The end user the request names (its `user` or `safety_identifier`), for a per-user budget. */
  user?: string | null;
}

export interface InflightStore {
  /**
   * Admits a request: on a prepaid plan it reserves the request's worst-case price, and refuses
   * (null) when the balance less the reservations already in flight is not positive. Serialised
   * per account across nodes, so credit is never overspent by more than the reservations in flight.
   * A key with a budget (or an account with a budget per end user) also reserves the worst case
   * on an unlimited plan, and throws BudgetExceededError when that worst case, with what was spent
   * in the period and what other requests in flight hold, would exceed the budget: never overspent.
   */
  admit(r: AdmitInput): Promise<InflightRequest | null>;
  /**
   * Records the request's usage row (and its charge unless `charge` is false) and ends its
   * reservation, in one transaction. False, with nothing written, when the request was already
   * ended (recorded as interrupted by a sweep): a request is recorded once.
   */
  finish(id: string, usage: UsageRecord, charge: boolean): Promise<boolean>;
  /** Ends a request that never started generating (refused by the engine): no usage row. */
  discard(id: string): Promise<void>;
  /** Ends a request that cannot finish: a usage row with this status and no tokens, nothing charged. */
  interrupt(id: string, status?: string): Promise<boolean>;
  /** Interrupts every request in flight on a node not in `liveNodes` (its process is gone). */
  sweep(liveNodes: string[]): Promise<number>;
  list(accountId?: number): Promise<InflightRequest[]>;
}

export type UserRole = "member" | "operator";

export interface User {
  id: number;
  accountId: number;
  accountName: string;
  email: string;
  role: UserRole;
  createdAt: number;
}

export interface UserStore {
  /**
   * Hashes the password with argon2id; throws on a bad email, a short password or a taken email.
   * password null: a user who signs in through the OpenID provider only, until a password is set.
   */
  create(input: { accountId: number; email: string; password: string | null; role?: UserRole }): Promise<User>;
  /** Changes the user's role; false when there is no such user. */
  setRole(userId: number, role: UserRole): Promise<boolean>;
  /** The user whose email and password match, or null (same work either way: no user enumeration by timing). */
  verify(email: string, password: string): Promise<User | null>;
  setPassword(userId: number, password: string): Promise<void>;
  get(id: number): Promise<User | null>;
  getByEmail(email: string): Promise<User | null>;
  list(accountId?: number): Promise<User[]>;
  /** Deletes the user and its sessions. */
  remove(userId: number): Promise<boolean>;
}

export interface SessionInfo {
  userId: number;
  csrfToken: string;
  createdAt: number;
  expiresAt: number;
}

export interface SessionStore {
  /** A new session; the plain token goes into the cookie, only its hash is stored. */
  create(userId: number, ttlMs: number): Promise<{ token: string; session: SessionInfo }>;
  /** The live session behind a cookie token, or null when unknown or expired. */
  get(token: string): Promise<SessionInfo | null>;
  destroy(token: string): Promise<void>;
  destroyForUser(userId: number): Promise<void>;
  purgeExpired(now?: number): Promise<number>;
}

export interface SignInThrottleStore {
  recordFailure(email: string, client: string, at?: number): Promise<void>;
  /** Failures since `since` for this email and for this client. */
  failures(email: string, client: string, since: number): Promise<{ email: number; client: number }>;
  /** Forgets an email's failures after a successful sign-in. */
  clear(email: string): Promise<void>;
}

/** Workspace sign-ins sent to the OpenID provider and not yet back (see workspace/oidc.ts). */
export interface OidcLoginStore {
  /** Remembers a sign-in under its state for ttlMs; the state itself is not stored, only its hash. */
  begin(state: string, pending: { nonce: string; codeVerifier: string }, ttlMs: number): Promise<void>;
  /** The sign-in begun with this state, removed as it is read: null when unknown, used or expired. */
  take(state: string): Promise<{ nonce: string; codeVerifier: string } | null>;
}

export interface DailyUsage {
  /** UTC day, YYYY-MM-DD. */
  day: string;
  requests: number;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  reasoningTokens: number;
}

export interface ModelUsage {
  modelId: string;
  requests: number;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  reasoningTokens: number;
}

export type UsageGrouping = "key" | "model" | "user" | "day";

/** An account's usage in a range, summed over one key, model, end user or UTC day. */
export interface UsageGroup {
  /** The key id, model id, end user (null: requests that named none) or YYYY-MM-DD. */
  group: string | null;
  requests: number;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  reasoningTokens: number;
  costUsd: number;
}

export interface UsageReportStore {
  daily(accountId: number, since: number, until: number): Promise<DailyUsage[]>;
  byModel(accountId: number, since: number, until: number): Promise<ModelUsage[]>;
  /** Spend and tokens grouped one way, dearest first (by day: in day order). */
  grouped(accountId: number, by: UsageGrouping, since: number, until: number): Promise<UsageGroup[]>;
}

/** Per-minute and concurrency limits; null means no limit on that dimension. */
export interface RateLimits {
  requestsPerMinute: number | null;
  tokensPerMinute: number | null;
  maxConcurrent: number | null;
}

export interface RateLimitEntry extends RateLimits {
  accountId: number;
  accountName: string;
  /** null: the limit applies to the whole account; else to this key only (on top of the account's). */
  keyId: string | null;
  /** null: to every model; else to requests for this model only (on top of the scope's others). */
  modelId: string | null;
  updatedAt: number;
}

/** A limit on one model's requests, of the account or of the key. */
export type ModelLimit = Readonly<{ modelId: string; onKey: boolean; limits: RateLimits }>;

export type EffectiveLimits = Readonly<{ accountId: number; account: RateLimits | null; key: RateLimits | null; models: readonly ModelLimit[] }>;

export interface LimitStore {
  /** The limits set for exactly this scope (the account when keyId is null; every model when modelId is null), or null. */
  get(accountId: number, keyId?: string | null, modelId?: string | null): Promise<RateLimits | null>;
  /** Sets the scope's limits; all three null removes them. */
  set(accountId: number, keyId: string | null, limits: RateLimits, modelId?: string | null): Promise<void>;
  list(accountId?: number): Promise<RateLimitEntry[]>;
  /** The account's and the key's limits for a request (and those per model); cached, yet a change is seen on the next request. */
  effective(accountId: number, keyId: string): Promise<EffectiveLimits>;
  /** `effective` from memory, or undefined when not cached. */
  peekEffective(accountId: number, keyId: string): EffectiveLimits | undefined;
}

/** One rate-limited scope of a request: an account or a key, with its limits. */
export interface LimitScope {
  /** "account:1" or "key:key_…": counters are kept per scope. */
  id: string;
  limits: RateLimits;
}

export interface DimensionState {
  limit: number;
  remaining: number;
  /** Until the bucket is full again. */
  resetMs: number;
}

export interface RateState {
  requests: DimensionState | null;
  tokens: DimensionState | null;
}

export type RateRefusal = {
  ok: false;
  dimension: "requests" | "tokens" | "concurrency";
  scope: string;
  limit: number;
  retryAfterMs: number;
  state: RateState;
};

export type RateAdmission = { ok: true; state: RateState } | RateRefusal;

/**
 * Rate-limit counters kept in the database, for limits that hold across nodes: token buckets per
 * scope, and the requests each node runs per scope (a dead node's count stops counting).
 */
export interface RateStore {
  admit(nodeId: string, scopes: readonly LimitScope[], estimatedTokens: number, hold: boolean): Promise<RateAdmission>;
  /** Gives back what a request estimated and did not use. */
  settle(scopeIds: readonly string[], estimatedTokens: number, actualTokens: number): Promise<void>;
  /** Frees the concurrency slot a held admission took on this node. */
  release(nodeId: string, scopeIds: readonly string[]): Promise<void>;
  /** Forgets the running counts of nodes not in `liveNodes`. */
  sweep(liveNodes: string[]): Promise<number>;
}

export interface NodeModel {
  id: string;
  /** Requests queued or running for the model on that node, as last reported. */
  queueDepth: number;
}

export interface NodeInfo {
  id: string;
  /** How other nodes reach it (its --node-url). */
  url: string;
  version: string;
  startedAt: number;
  heartbeatAt: number;
  /** The node counts as dead from then on unless its heartbeat moves it. */
  expiresAt: number;
  models: NodeModel[];
}

export interface NodeStore {
  /** Registers or refreshes this node and the models it serves; the registration is good for ttlMs. */
  heartbeat(node: { id: string; url: string; version: string; startedAt: number }, models: NodeModel[], ttlMs: number): Promise<void>;
  /** Nodes whose heartbeat has not expired, with their models, by id. */
  live(): Promise<NodeInfo[]>;
  /** Removes a node and its models (clean shutdown). */
  remove(nodeId: string): Promise<void>;
  /** Removes the nodes whose heartbeat expired; their ids. */
  sweep(): Promise<string[]>;
}

/** Who made a change: the OS user of a CLI command, a workspace user, an admin API token (its label). */
export interface AuditActor {
  kind: "cli" | "workspace" | "admin_api";
  name: string;
  /** Where the change came from: the client's address, or the host the CLI ran on. */
  source: string | null;
}

export interface AuditInput {
  actor: AuditActor;
  /** What was done, e.g. "keys.create", "billing.topUp". */
  action: string;
  /** What it was done to, e.g. "key:key_…", "account:acme", "model:org/m". */
  target: string | null;
  /** The target's state before and after (no secret ever: keys, passwords and tokens are never in it). */
  before: unknown;
  after: unknown;
}

export interface AuditEntry {
  id: number;
  /** 1, 2, 3 … in the order of the chain. */
  seq: number;
  at: number;
  actorKind: AuditActor["kind"];
  actor: string;
  source: string | null;
  action: string;
  target: string | null;
  before: unknown;
  after: unknown;
  prevHash: string;
  hash: string;
}

export type AuditVerdict = { ok: true; rows: number } | { ok: false; rows: number; seq: number; problem: string };

export interface AuditStore {
  /** Appends an entry to the chain (in the caller's transaction, when there is one). */
  append(e: AuditInput): Promise<AuditEntry>;
  /** Newest first. */
  list(opts?: { since?: number; until?: number; limit?: number; target?: string }): Promise<AuditEntry[]>;
  /** Walks the whole chain: every row's hash is recomputed and linked to the previous one's. */
  verify(): Promise<AuditVerdict>;
}

export interface AdminToken {
  id: string;
  label: string;
  prefix: string;
  createdAt: number;
  lastUsedAt: number | null;
  revokedAt: number | null;
}

export interface AdminTokenStore {
  /** The plain token is returned once; only its hash is kept. */
  create(label: string): Promise<{ token: string; info: AdminToken }>;
  /** The active token with this plain text, or null. */
  authenticate(plain: string): Promise<AdminToken | null>;
  list(): Promise<AdminToken[]>;
  get(id: string): Promise<AdminToken | null>;
  /** False when there is no such active token. */
  revoke(id: string): Promise<boolean>;
  touch(id: string): Promise<void>;
}

/** The table families, as a transaction sees them too. */
export interface StoreTables {
  accounts: AccountStore;
  limits: LimitStore;
  keys: KeyStore;
  catalog: CatalogStore;
  usage: UsageStore;
  billing: BillingStore;
  inflight: InflightStore;
  users: UserStore;
  sessions: SessionStore;
  signIns: SignInThrottleStore;
  oidcLogins: OidcLoginStore;
  usageReports: UsageReportStore;
  rates: RateStore;
  nodes: NodeStore;
  audit: AuditStore;
  adminTokens: AdminTokenStore;
}

export interface Store extends StoreTables {
  /** sqlite: one node's file; postgres: shared by several nodes. */
  readonly kind: DialectName;
  /** The SQLite file, or the PostgreSQL URL without its password. */
  readonly location: string;
  /**
   * A number that changes whenever keys, rate limits, the catalog, model access, accounts or the
   * models of live nodes change (in any process or node using the database): what a cache of those
   * checks to stay exact. Synchronous and cheap: it is read on every request.
   */
  cacheGeneration(): number;
  /** True while the database answers. */
  healthy(): Promise<boolean>;
  /** Runs fn in one transaction: all of its writes land, or none. */
  atomically<T>(fn: (tx: StoreTables) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}
