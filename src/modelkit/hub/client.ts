// The Hub API through @huggingface/hub (the Hub's own client: model info, tree listing, paths
// info, file download info), with one fetch wrapper of ours in between. The wrapper is the
// library's documented `fetch` hook; it keeps what the library's errors drop (the Hub's
// X-Error-Code, and whether a ranged request got 206), adds a timeout to API calls and lets a
// transfer abort a stalled download.
import { downloadFile, HubApiError, listFiles, modelInfo, pathsInfo, type ListFileEntry, type PathInfo } from "@huggingface/hub";
import type { HubToken } from "./auth.ts";
import { hubFailure, networkFailure, PullError, type FailureContext, type HubFailure } from "./errors.ts";

/** API calls (not file bodies) that take longer than this are given up as a network failure. */
const API_TIMEOUT_MS = 60_000;

export interface ResponseInfo {
  status: number;
  contentRange: string | null;
}

export interface HubClientOptions {
  endpoint: string;
  token: HubToken | null;
  repo: string;
  /** Shown in messages until the commit is known. */
  revision: string;
  /** Ends every request of the pull (a cancelled job). */
  signal?: AbortSignal;
}

/** A file of the repository at the pinned commit. */
export interface RepoFile {
  path: string;
  size: number;
  /** SHA-256 of the content for LFS files (the Hub's lfs.oid), else null. */
  sha256: string | null;
  /** Git blob id (SHA-1 of "blob <size>\0" + content), for files kept in git itself. */
  gitOid: string | null;
}

export class HubClient {
  readonly endpoint: string;
  readonly repo: string;
  revision: string;
  private readonly accessToken: string | undefined;
  private lastFailure: HubFailure | null = null;

  constructor(private readonly opts: HubClientOptions) {
    this.endpoint = opts.endpoint;
    this.repo = opts.repo;
    this.revision = opts.revision;
    this.accessToken = opts.token?.token;
    if (this.accessToken && !this.accessToken.startsWith("hf_")) {
      throw new PullError("usage", `the Hub token from ${opts.token!.source} does not look like one: Hub tokens start with hf_`);
    }
  }

  get hasToken(): boolean {
    return this.accessToken !== undefined;
  }

  context(path?: string): FailureContext {
    return { repo: this.repo, revision: this.revision, endpoint: this.endpoint, hasToken: this.hasToken, path };
  }

  /**
   * The fetch handed to the library. `signal` aborts this request (a stalled transfer);
   * `seen` receives each response's status before the library reads it.
   */
  fetchFor(signal?: AbortSignal, seen?: (r: ResponseInfo) => void): typeof fetch {
    const wrapped = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      const signals = [signal ?? AbortSignal.timeout(API_TIMEOUT_MS), this.opts.signal].filter((s): s is AbortSignal => s !== undefined);
      const res = await fetch(input, { ...init, signal: AbortSignal.any(signals) });
      seen?.({ status: res.status, contentRange: res.headers.get("content-range") });
      if (!res.ok) {
        // The library's error keeps the status and body but not this header, which tells a gated
        // repository from a missing one.
        this.lastFailure = { status: res.status, code: res.headers.get("x-error-code"), message: null };
      }
      return res;
    };
    return Object.assign(wrapped, { preconnect: fetch.preconnect }) as typeof fetch;
  }

  /** Runs a library call, turning its errors into PullErrors in words. */
  async call<T>(what: () => Promise<T>, path?: string): Promise<T> {
    this.lastFailure = null;
    try {
      return await what();
    } catch (e) {
      throw this.failure(e, path);
    }
  }

  /** The PullError for anything a library call or a download threw. */
  failure(e: unknown, path?: string): PullError {
    if (e instanceof PullError) return e;
    if (this.opts.signal?.aborted) return new PullError("cancelled", "the pull was cancelled");
    if (e instanceof HubApiError) {
      const message = e.message.split(". URL:")[0] ?? null;
      return hubFailure({ status: e.statusCode, code: this.lastFailure?.code ?? null, message }, this.context(path));
    }
    if (this.lastFailure) return hubFailure(this.lastFailure, this.context(path));
    return networkFailure(e, this.context(path));
  }

  /** The commit the revision names now, and whether the repository is gated. */
  async resolve(): Promise<{ commit: string; gated: boolean }> {
    const info = await this.call(() =>
      modelInfo({ name: this.repo, revision: this.revision, additionalFields: ["sha"], hubUrl: this.endpoint, accessToken: this.accessToken, fetch: this.fetchFor() }),
    );
    const commit = (info as { sha?: unknown }).sha;
    if (typeof commit !== "string" || !/^[0-9a-f]{40}$/.test(commit)) {
      throw new PullError("hub", `the Hub did not say which commit ${this.revision} of ${this.repo} is`);
    }
    return { commit, gated: info.gated !== false && info.gated !== undefined };
  }

  /** The entries of one folder ("" for the top), or of the whole tree. */
  async list(path: string, recursive = false): Promise<ListFileEntry[]> {
    return this.call(async () => {
      const out: ListFileEntry[] = [];
      for await (const e of listFiles({ repo: this.repo, path: path || undefined, recursive, revision: this.revision, hubUrl: this.endpoint, accessToken: this.accessToken, fetch: this.fetchFor() })) {
        out.push(e);
      }
      return out;
    });
  }

  /** Size and hashes of exactly these files at the pinned revision; every one must exist. */
  async files(paths: string[]): Promise<RepoFile[]> {
    const infos: PathInfo[] = await this.call(() =>
      pathsInfo({ repo: this.repo, paths, revision: this.revision, hubUrl: this.endpoint, accessToken: this.accessToken, fetch: this.fetchFor() }),
    );
    const byPath = new Map(infos.filter((i) => i.type === "file").map((i) => [i.path, i]));
    return paths.map((p) => {
      const i = byPath.get(p);
      if (!i) throw new PullError("not_found", `${p} of ${this.repo} is not in the repository at ${this.revision}`);
      return { path: p, size: i.lfs?.size ?? i.size, sha256: i.lfs?.oid ?? null, gitOid: i.lfs ? null : (i.oid ?? null) };
    });
  }

  /** A small file's text (genai_config.json, read to learn which files it names). */
  async text(path: string): Promise<string> {
    const blob = await this.call(() => downloadFile({ repo: this.repo, path, revision: this.revision, hubUrl: this.endpoint, accessToken: this.accessToken, xet: false, fetch: this.fetchFor() }), path);
    if (!blob) throw new PullError("not_found", `${path} of ${this.repo} is not in the repository at ${this.revision}`);
    return this.call(() => blob.text(), path);
  }

  /**
   * The body of `path` from byte `from` on, through the library's download: its blob reads the
   * resolve URL (following the LFS redirect) and a slice of it is a Range request. Xet storage
   * is not used: the Hub serves the same bytes through the resolve URL, which is what a
   * resumable, verifiable transfer needs.
   */
  async body(path: string, from: number, size: number, fetchImpl: typeof fetch): Promise<ReadableStream<Uint8Array>> {
    this.lastFailure = null;
    const blob = await downloadFile({ repo: this.repo, path, revision: this.revision, hubUrl: this.endpoint, accessToken: this.accessToken, xet: false, fetch: fetchImpl });
    if (!blob) throw new PullError("not_found", `${path} of ${this.repo} is not in the repository at ${this.revision}`);
    if (blob.size !== size) throw new PullError("hub", `${path} of ${this.repo}: the Hub lists ${size} bytes but serves ${blob.size}`);
    return (from > 0 ? blob.slice(from) : blob).stream() as ReadableStream<Uint8Array>;
  }
}
