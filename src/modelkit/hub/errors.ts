// What can go wrong in a pull, in words an operator can act on. Each failure has a kind (for the
// exit code and the admin page) and a message that names the repo, the file and what to do.

export type PullErrorKind =
  | "usage"
  | "not_found"
  | "gated"
  | "forbidden"
  | "network"
  | "disk_full"
  | "checksum"
  | "no_model"
  | "safetensors_only"
  | "busy"
  | "hub"
  | "cancelled";

export class PullError extends Error {
  constructor(
    readonly kind: PullErrorKind,
    message: string,
  ) {
    super(message);
    this.name = "PullError";
  }
}

/** What the Hub answered to a request that failed, as the wrapped fetch saw it (see client.ts). */
export interface HubFailure {
  status: number;
  /** The Hub's X-Error-Code: RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo… */
  code: string | null;
  message: string | null;
}

export interface FailureContext {
  repo: string;
  revision: string;
  endpoint: string;
  hasToken: boolean;
  /** The file being fetched, when the failure was a download. */
  path?: string;
}

const TOKEN_HINT = "set HF_TOKEN to a token of an account that may read it (or run `huggingface-cli login`, which writes ~/.cache/huggingface/token)";

/** The words for an HTTP failure of the Hub API or of a download. */
export function hubFailure(f: HubFailure, c: FailureContext): PullError {
  const where = c.path ? `${c.path} of ${c.repo}` : c.repo;
  if (f.code === "GatedRepo" || (f.status === 401 && c.path && f.code !== "RepoNotFound")) {
    return new PullError(
      "gated",
      c.hasToken
        ? `${c.repo} is a gated repository and the token in use may not read it: accept its conditions on the Hub with the account the token belongs to, or set HF_TOKEN to another token`
        : `${c.repo} is a gated repository: accept its conditions on the Hub, then ${TOKEN_HINT}`,
    );
  }
  if (f.code === "RevisionNotFound") return new PullError("not_found", `${c.repo} has no revision ${JSON.stringify(c.revision)} (a branch, tag or commit)`);
  if (f.code === "EntryNotFound") return new PullError("not_found", `${where}: the file is not in the repository at ${c.revision}`);
  if (f.code === "RepoNotFound" || (f.status === 404 && !c.path) || (f.status === 401 && !c.path)) {
    return new PullError(
      "not_found",
      c.hasToken
        ? `no model repository ${c.repo} on ${c.endpoint}, or the token in use may not read it`
        : `no model repository ${c.repo} on ${c.endpoint} (if it is private, ${TOKEN_HINT})`,
    );
  }
  if (f.status === 401) return new PullError("gated", `${where}: the Hub refused the request without valid credentials; ${TOKEN_HINT}`);
  if (f.status === 403) return new PullError("forbidden", `${where}: the Hub refused access (403)${f.message ? `: ${f.message}` : ""}`);
  if (f.status === 404) return new PullError("not_found", `${where}: not found on the Hub (404)`);
  if (f.status === 429) return new PullError("hub", `${where}: the Hub is rate limiting requests (429); try again later`);
  return new PullError("hub", `${where}: the Hub answered ${f.status}${f.message ? ` (${f.message})` : ""}`);
}

/** A fetch that never got an answer: DNS, refused connection, TLS, timeout. */
export function networkFailure(e: unknown, c: FailureContext): PullError {
  const detail = (e instanceof Error ? e.message : String(e)).split(/\.(\s|$)/)[0];
  return new PullError("network", `cannot reach the Hub at ${c.endpoint}${c.path ? ` while fetching ${c.path}` : ""} (${detail}): check the network, or HF_ENDPOINT if you use a mirror`);
}

/** True for errors thrown by the file layer when the disk (or quota) is full. */
export function isDiskFull(e: unknown): boolean {
  const code = (e as { code?: unknown })?.code;
  return code === "ENOSPC" || code === "EDQUOT";
}
