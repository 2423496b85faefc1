// Route and context types shared by the pages, and the small path matcher they use.
import { commandLine } from "../invocation.ts";
import type { ModelResidency, ResidencySummary } from "../engine/types.ts";
import type { Logger } from "../log.ts";
import type { SessionInfo, Store, User } from "../store/index.ts";
import type { Flash } from "./flash.ts";

export interface WorkspaceOptions {
  store: Store;
  log: Logger;
  /** The API's base URL as clients should use it (without /v1), for a request to the workspace. */
  apiBase: (request: Request) => string;
  /** How long a session lasts; 12 hours by default. */
  sessionTtlMs?: number;
  /** Sign-in throttling: failures allowed per email and per client within the window. */
  throttle?: { windowMs: number; perEmail: number; perClient: number };
  /** Pulls from the Hugging Face Hub for the admin page; absent: the page does not offer them. */
  hubPulls?: HubPullService;
  /** The engine's residency, for the admin page's "Loaded models"; absent: not shown. */
  residency?: ResidencyControl;
  /** A form's body must arrive within this long (serve --body-timeout-seconds); a later one gets 408. */
  bodyTimeoutMs?: number;
  /** A CLI command line that acts on this server's data, as its operator would type it (default: without --data). */
  command?: (...words: string[]) => string;
}

/** What the admin page may see and do of the models in memory. */
export interface ResidencyControl {
  summary(): ResidencySummary;
  load(id: string): Promise<ModelResidency>;
  /** Throws while requests use it. */
  unload(id: string): Promise<ModelResidency>;
}

/** A pull the server runs for the admin page, as the page shows it. */
export interface HubPullStatus {
  id: string;
  repo: string;
  revision: string;
  dtype: string;
  modelId: string;
  state: "running" | "done" | "failed";
  message: string;
  error: string | null;
  bytesDone: number;
  bytesTotal: number;
  file: string | null;
}

export interface HubPullService {
  /** Throws an Error whose message says what is wrong with the request. */
  start(req: { repo: string; revision?: string; dtype?: string }): HubPullStatus;
  get(id: string): HubPullStatus | null;
  list(): HubPullStatus[];
}

/** The command line a page shows an operator for a CLI command. */
export const operatorCommand = (opts: WorkspaceOptions, ...words: string[]) => (opts.command ?? commandLine)(...words);

export interface BaseCtx {
  request: Request;
  url: URL;
  params: Record<string, string>;
  opts: WorkspaceOptions;
  store: Store;
  /** The client's address (for throttling), or "unknown". */
  client: string;
  /** What the form whose redirect led to this GET had to say (flash.ts); null otherwise. */
  flash: Flash | null;
  /** First value of a submitted field, trimmed; "" when absent. */
  field(name: string): string;
  fields(name: string): string[];
}

export interface SignedCtx extends BaseCtx {
  user: User;
  session: SessionInfo;
}

export type Access = "public" | "user" | "operator";

export type Route =
  | { method: "GET" | "POST"; path: string; access: "public"; handle(c: BaseCtx): Response | Promise<Response> }
  | { method: "GET" | "POST"; path: string; access: "user" | "operator"; handle(c: SignedCtx): Response | Promise<Response> };

export interface CompiledRoute {
  route: Route;
  re: RegExp;
  names: string[];
}

/** '/keys/:id/revoke' → a RegExp with one group per ':name' (a single path segment). */
export function compile(route: Route): CompiledRoute {
  const names: string[] = [];
  const src = route.path.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/:([a-z]+)/g, (_, n: string) => {
    names.push(n);
    return "([^/]+)";
  });
  return { route, re: new RegExp(`^${src}$`), names };
}

export function match(routes: CompiledRoute[], method: string, path: string) {
  let pathMatched = false;
  for (const r of routes) {
    const m = r.re.exec(path);
    if (!m) continue;
    pathMatched = true;
    if (r.route.method !== method && !(method === "HEAD" && r.route.method === "GET")) continue;
    const params: Record<string, string> = {};
    r.names.forEach((n, i) => (params[n] = decodeURIComponent(m[i + 1]!)));
    return { route: r.route, params };
  }
  return pathMatched ? "method" : null;
}
