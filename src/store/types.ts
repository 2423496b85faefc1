// The store's interface: the rest of the program sees these records and operations, never SQL.
// A second implementation (PostgreSQL, for several nodes) will implement the same interface.

export interface Account {
  id: number;
  name: string;
  /** 'all': every active model; 'listed': only models granted to the account. */
  modelAccess: "all" | "listed";
  createdAt: number;
}

export interface ApiKeyInfo {
  id: string;
  accountId: number;
  accountName: string;
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
  outputPricePerMTok: number;
  supportsImages: boolean;
  supportsTools: boolean;
  supportsStructured: boolean;
  ownedBy: string;
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
  setPrices(id: string, inputPerMTok: number, outputPerMTok: number): boolean;
  /** Served models this account may use. */
  listForAccount(accountId: number): CatalogModel[];
  /** A served model this account may use, by exact id, or null. */
  getForAccount(accountId: number, id: string): CatalogModel | null;
  grant(accountId: number, modelId: string): void;
  revoke(accountId: number, modelId: string): void;
  grants(accountId: number): string[];
}

export interface UsageStore {
  record(row: UsageRecord): void;
  list(accountId: number, opts?: { since?: number; until?: number; limit?: number }): UsageRow[];
  countAll(): number;
}

export interface Store {
  accounts: AccountStore;
  keys: KeyStore;
  catalog: CatalogStore;
  usage: UsageStore;
  /** True while the underlying database answers. */
  healthy(): boolean;
  close(): void;
}
