// The store's interface: the rest of the program sees these records and operations, never SQL.
// A second implementation (PostgreSQL, for several nodes) will implement the same interface.

export interface Account {
  id: number;
  name: string;
  /** 'all': every active model; 'listed': only models granted to the account. */
  modelAccess: "all" | "listed";
  /** On a busy model, higher priorities are admitted first (and may preempt lower ones). */
  priority: number;
  createdAt: number;
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
  /** Set when the directory could not be loaded: the entry is kept but not served. */
  loadError: string | null;
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
}

export interface AccountStore {
  create(name: string): Account;
  get(name: string): Account | null;
  getById(id: number): Account | null;
  list(): Account[];
  /** False when there is no such account. */
  setPriority(id: number, priority: number): boolean;
}

export interface KeyStore {
  /** Returns the plain key once; only its hash is kept. */
  create(accountId: number, label: string | null): { key: string; info: ApiKeyInfo };
  /** The active (not revoked) key with this plain text, or null. */
  authenticate(plainKey: string): ApiKeyInfo | null;
  touch(keyId: string, at?: number): void;
  list(accountId?: number): ApiKeyInfo[];
  /** False when there is no such key or it was already revoked. */
  revoke(keyId: string, accountId?: number): boolean;
  count(accountId: number): number;
}

export interface CatalogStore {
  /** Upserts the discovered models and marks the others as no longer present. */
  sync(models: DiscoveredModel[]): { added: string[]; updated: string[]; missing: string[] };
  get(id: string): CatalogModel | null;
  list(): CatalogModel[];
  /** Active and present: what the gateway serves. */
  listServed(): CatalogModel[];
  setStatus(id: string, status: "active" | "inactive"): boolean;
  /** Seconds to stay loaded once idle (-1: always; null: the model's or the server's default). False: no such model. */
  setKeepAlive(id: string, seconds: number | null): boolean;
  /** `cachedInputPerMTok`: undefined leaves it as it is; null charges cached prompt tokens the input price. */
  setPrices(id: string, inputPerMTok: number, outputPerMTok: number, cachedInputPerMTok?: number | null): boolean;
  /** Served models this account may use. */
  listForAccount(accountId: number): CatalogModel[];
  /** A served model this account may use, by exact id, or null. */
  getForAccount(accountId: number, id: string): CatalogModel | null;
  grant(accountId: number, modelId: string): void;
  revoke(accountId: number, modelId: string): void;
  grants(accountId: number): string[];
  /** Lifts a restriction: the account sees every served model again, present and future. */
  allowAll(accountId: number): void;
}

export interface UsageStore {
  record(row: UsageRecord): void;
  list(accountId: number, opts?: { since?: number; until?: number; limit?: number }): UsageRow[];
  countAll(): number;
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
  plan(accountId: number): Plan;
  setPlan(accountId: number, plan: Plan): void;
  balanceUsd(accountId: number): number;
  /** Whether a request may start: unlimited plans always, prepaid ones while the balance is positive. */
  hasCredit(accountId: number): boolean;
  /** Charges a finished request at the model's current prices; the entry, or null for an unknown model. */
  charge(c: ChargeInput): LedgerEntry | null;
  topUp(accountId: number, usd: number, note: string | null): LedgerEntry;
  history(accountId: number, opts?: { since?: number; until?: number; limit?: number }): LedgerEntry[];
  summary(accountId: number, since: number, until?: number): BillingSummary;
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
  /** Hashes the password with argon2id; throws on a bad email, a short password or a taken email. */
  create(input: { accountId: number; email: string; password: string; role?: UserRole }): Promise<User>;
  /** The user whose email and password match, or null (same work either way: no user enumeration by timing). */
  verify(email: string, password: string): Promise<User | null>;
  setPassword(userId: number, password: string): Promise<void>;
  get(id: number): User | null;
  getByEmail(email: string): User | null;
  list(accountId?: number): User[];
  /** Deletes the user and its sessions. */
  remove(userId: number): boolean;
}

export interface SessionInfo {
  userId: number;
  csrfToken: string;
  createdAt: number;
  expiresAt: number;
}

export interface SessionStore {
  /** A new session; the plain token goes into the cookie, only its hash is stored. */
  create(userId: number, ttlMs: number): { token: string; session: SessionInfo };
  /** The live session behind a cookie token, or null when unknown or expired. */
  get(token: string): SessionInfo | null;
  destroy(token: string): void;
  destroyForUser(userId: number): void;
  purgeExpired(now?: number): number;
}

export interface SignInThrottleStore {
  recordFailure(email: string, client: string, at?: number): void;
  /** Failures since `since` for this email and for this client. */
  failures(email: string, client: string, since: number): { email: number; client: number };
  /** Forgets an email's failures after a successful sign-in. */
  clear(email: string): void;
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

export interface UsageReportStore {
  daily(accountId: number, since: number, until: number): DailyUsage[];
  byModel(accountId: number, since: number, until: number): ModelUsage[];
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
  updatedAt: number;
}

export interface LimitStore {
  /** The limits set for exactly this scope (the account when keyId is null), or null. */
  get(accountId: number, keyId?: string | null): RateLimits | null;
  /** Sets the scope's limits; all three null removes them. */
  set(accountId: number, keyId: string | null, limits: RateLimits): void;
  list(accountId?: number): RateLimitEntry[];
  /** The account's and the key's limits for a request; cached, yet a change is seen on the next request. */
  effective(accountId: number, keyId: string): { account: RateLimits | null; key: RateLimits | null };
}

export interface Store {
  accounts: AccountStore;
  limits: LimitStore;
  keys: KeyStore;
  catalog: CatalogStore;
  usage: UsageStore;
  billing: BillingStore;
  users: UserStore;
  sessions: SessionStore;
  signIns: SignInThrottleStore;
  usageReports: UsageReportStore;
  /**
   * A number that changes whenever keys, rate limits, the catalog, model access or accounts change
   * (in any process using the file): what a cache of those checks to stay exact.
   */
  cacheGeneration(): number;
  /** True while the underlying database answers. */
  healthy(): boolean;
  /** Runs fn in one transaction: all of its writes land, or none. */
  atomically<T>(fn: () => T): T;
  close(): void;
}
