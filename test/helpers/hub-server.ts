// A Hugging Face Hub–compatible file server for pull tests, on a free loopback port. It answers
// what @huggingface/hub and huggingface_hub use: model info with the commit `sha`, the `tree`
// listing (paginated with Link headers), `paths-info`, and `resolve`, which serves small files
// itself and redirects LFS files to a "CDN" origin (the same server under another host name, as
// the real Hub sends them to another host) with X-Linked-Size / X-Linked-Etag / X-Repo-Commit.
// Bodies honour Range and carry ETags. Gated repositories answer 401 GatedRepo without a token.
// Every request is logged, with the bytes of body actually sent, and faults can be injected:
// a body cut after N bytes, a corrupted byte, a body held after N bytes until released.
import { createHash } from "node:crypto";
import { readFileSync, statSync } from "node:fs";

export interface HubFileSpec {
  /** Path in the repository. */
  path: string;
  /** A local file to serve, or the bytes themselves. */
  source: string | Uint8Array;
}

export interface HubRepoSpec {
  id: string;
  files: HubFileSpec[];
  /** Files need a token the server accepts (huggingface's "gated" repositories). */
  gated?: boolean;
  /** Branch or tag names; all resolve to the repo's one commit. Default ["main"]. */
  refs?: string[];
}

interface StoredFile {
  path: string;
  bytes: () => Uint8Array;
  size: number;
  gitOid: string;
  sha256: string;
  lfs: boolean;
}

interface StoredRepo {
  id: string;
  commit: string;
  gated: boolean;
  refs: Set<string>;
  files: Map<string, StoredFile>;
}

export interface HubRequestLog {
  method: string;
  /** Path and query, decoded. */
  path: string;
  /** The repository path of a file served (resolve or its LFS redirect target). */
  file: string | null;
  range: string | null;
  auth: boolean;
  status: number;
  /** Body bytes actually sent (after faults). */
  bytes: number;
}

export interface HoldFault {
  after: number;
  /** Resolves when the held body may go on. */
  released: Promise<void>;
  /** Called once `after` bytes have been sent and the body waits. */
  reach: () => void;
}

export interface HubFaults {
  /** Send only this many bytes of the file's body, then end it short (once per entry). */
  cutOnce: Map<string, number>;
  /** Flip one byte in every body of these files. */
  corrupt: Set<string>;
  /** Answer ranged requests for these files with the whole body (200), as servers without Range do. */
  ignoreRange: Set<string>;
  /** Pause the file's body after N bytes until released (once per entry). */
  hold: Map<string, HoldFault>;
  /** Called before a file body is sent (e.g. to fill a disk). */
  beforeBody?: (file: string) => void;
  /** Body bytes per second for every file body (0: unlimited). */
  bytesPerSecond: number;
}

export const HUB_TOKEN = "hf_localtesttoken0123456789";
const PAGE = 50;
const LFS_RE = /\.(onnx|onnx_data|data|safetensors|bin|gguf)$|\.onnx_data_\d+$/;

const gitOid = (b: Uint8Array) => createHash("sha1").update(`blob ${b.byteLength}\0`).update(b).digest("hex");
const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

function store(spec: HubRepoSpec): StoredRepo {
  const files = new Map<string, StoredFile>();
  for (const f of spec.files) {
    const bytes = typeof f.source === "string" ? new Uint8Array(readFileSync(f.source)) : f.source;
    const size = typeof f.source === "string" ? statSync(f.source).size : f.source.byteLength;
    files.set(f.path, { path: f.path, bytes: () => bytes, size, gitOid: gitOid(bytes), sha256: sha256(bytes), lfs: LFS_RE.test(f.path) });
  }
  const commit = createHash("sha1")
    .update(spec.id)
    .update([...files.values()].map((f) => `${f.path}:${f.gitOid}`).join("\n"))
    .digest("hex");
  return { id: spec.id, commit, gated: spec.gated ?? false, refs: new Set(spec.refs ?? ["main"]), files };
}

export class HubServer {
  readonly requests: HubRequestLog[] = [];
  readonly faults: HubFaults = { cutOnce: new Map(), corrupt: new Set(), ignoreRange: new Set(), hold: new Map(), bytesPerSecond: 0 };
  private readonly repos = new Map<string, StoredRepo>();
  private readonly server: ReturnType<typeof Bun.serve>;

  constructor(specs: HubRepoSpec[]) {
    for (const s of specs) this.addRepo(s);
    this.server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (req) => this.handle(req) });
  }

  /** The Hub's URL (HF_ENDPOINT). */
  get url(): string {
    return `http://127.0.0.1:${this.server.port}`;
  }

  /** The LFS "CDN": the same server under another host name, so another origin. */
  get cdnUrl(): string {
    return `http://localhost:${this.server.port}`;
  }

  addRepo(spec: HubRepoSpec): void {
    this.repos.set(spec.id, store(spec));
  }

  commitOf(id: string): string {
    return this.repos.get(id)!.commit;
  }

  sha256Of(id: string, path: string): string {
    return this.repos.get(id)!.files.get(path)!.sha256;
  }

  sizeOf(id: string, path: string): number {
    return this.repos.get(id)!.files.get(path)!.size;
  }

  /** Body bytes the server sent for a repository file since the log was cleared (not the one-byte probes). */
  bytesSent(path: string): number {
    return this.requests.filter((r) => r.file === path && r.range !== "bytes=0-0").reduce((n, r) => n + r.bytes, 0);
  }

  /** Repository files whose bodies were requested (resolve or CDN), excluding probes of one byte. */
  filesFetched(): string[] {
    return [...new Set(this.requests.filter((r) => r.file && r.method === "GET" && r.range !== "bytes=0-0").map((r) => r.file!))];
  }

  /** Pauses the file's next body after `after` bytes until `release()` is called. */
  hold(path: string, after: number): { reached: Promise<void>; release: () => void } {
    let release!: () => void;
    let reach!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const reached = new Promise<void>((r) => (reach = r));
    this.faults.hold.set(path, { after, released, reach });
    return { reached, release };
  }

  clearLog(): void {
    this.requests.length = 0;
  }

  stop(): void {
    this.server.stop(true);
  }

  private authorized(req: Request): boolean {
    return req.headers.get("authorization") === `Bearer ${HUB_TOKEN}`;
  }

  private async handle(req: Request): Promise<Response> {
    const url = new URL(req.url);
    const path = decodeURIComponent(url.pathname);
    const entry: HubRequestLog = { method: req.method, path: path + url.search, file: null, range: req.headers.get("range"), auth: !!req.headers.get("authorization"), status: 0, bytes: 0 };
    this.requests.push(entry);
    const res = await this.route(req, url, path, entry);
    entry.status = res.status;
    return res;
  }

  private error(status: number, code: string | null, message: string): Response {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (code) headers["x-error-code"] = code;
    return new Response(JSON.stringify({ error: message }), { status, headers });
  }

  /** The repository and commit a request names, or the error the Hub would send. */
  private repoAt(req: Request, id: string, rev: string): { repo: StoredRepo } | { error: Response } {
    const repo = this.repos.get(id);
    if (!repo) {
      return { error: this.authorized(req) ? this.error(404, "RepoNotFound", "Repository not found") : this.error(401, "RepoNotFound", "Invalid username or password.") };
    }
    if (!repo.refs.has(rev) && rev !== repo.commit && rev !== "HEAD") return { error: this.error(404, "RevisionNotFound", `Invalid rev id: ${rev}`) };
    return { repo };
  }

  private entryJson(f: StoredFile) {
    return {
      type: "file",
      oid: f.lfs ? gitOid(new TextEncoder().encode(`version https://git-lfs.github.com/spec/v1\noid sha256:${f.sha256}\nsize ${f.size}\n`)) : f.gitOid,
      size: f.size,
      path: f.path,
      ...(f.lfs ? { lfs: { oid: f.sha256, size: f.size, pointerSize: 134 } } : {}),
    };
  }

  private entries(repo: StoredRepo, folder: string, recursive: boolean) {
    const out: Record<string, unknown>[] = [];
    const dirs = new Set<string>();
    const prefix = folder ? `${folder}/` : "";
    for (const f of [...repo.files.values()].sort((a, b) => a.path.localeCompare(b.path))) {
      if (!f.path.startsWith(prefix)) continue;
      const rest = f.path.slice(prefix.length);
      const parts = rest.split("/");
      for (let i = 1; i < parts.length && (recursive || i === 1); i++) dirs.add(prefix + parts.slice(0, i).join("/"));
      if (recursive || parts.length === 1) out.push(this.entryJson(f));
    }
    return [...[...dirs].map((d) => ({ type: "directory", oid: createHash("sha1").update(d).digest("hex"), size: 0, path: d })), ...out];
  }

  private async route(req: Request, url: URL, path: string, entry: HubRequestLog): Promise<Response> {
    let m = /^\/api\/models\/(.+)\/revision\/([^/]+)$/.exec(path);
    if (m && req.method === "GET") {
      const r = this.repoAt(req, m[1]!, m[2]!);
      if ("error" in r) return r.error;
      return Response.json({
        _id: createHash("sha1").update(r.repo.id).digest("hex").slice(0, 24),
        id: r.repo.id,
        modelId: r.repo.id,
        sha: r.repo.commit,
        private: false,
        gated: r.repo.gated ? "manual" : false,
        disabled: false,
        pipeline_tag: "text-generation",
        downloads: 0,
        likes: 0,
        lastModified: "2025-01-01T00:00:00.000Z",
        siblings: [...r.repo.files.keys()].map((rfilename) => ({ rfilename })),
      });
    }
    m = /^\/api\/models\/(.+)\/tree\/([^/]+)(?:\/(.*))?$/.exec(path);
    if (m && req.method === "GET") {
      const r = this.repoAt(req, m[1]!, m[2]!);
      if ("error" in r) return r.error;
      const folder = m[3] ?? "";
      if (folder && ![...r.repo.files.keys()].some((p) => p.startsWith(`${folder}/`))) return this.error(404, "EntryNotFound", `${folder} does not exist`);
      const all = this.entries(r.repo, folder, url.searchParams.get("recursive") === "true");
      const cursor = Number(url.searchParams.get("cursor") ?? "0");
      const page = all.slice(cursor, cursor + PAGE);
      const headers: Record<string, string> = {};
      if (cursor + PAGE < all.length) {
        const next = new URL(url);
        next.searchParams.set("cursor", String(cursor + PAGE));
        headers.link = `<${next.href}>; rel="next"`;
      }
      return Response.json(page, { headers });
    }
    m = /^\/api\/models\/(.+)\/paths-info\/([^/]+)$/.exec(path);
    if (m && req.method === "POST") {
      const r = this.repoAt(req, m[1]!, m[2]!);
      if ("error" in r) return r.error;
      const body = (await req.json()) as { paths?: string[] };
      const out: Record<string, unknown>[] = [];
      for (const p of body.paths ?? []) {
        const f = r.repo.files.get(p);
        if (f) out.push(this.entryJson(f));
        else if ([...r.repo.files.keys()].some((k) => k.startsWith(`${p}/`))) out.push({ type: "directory", oid: createHash("sha1").update(p).digest("hex"), size: 0, path: p });
      }
      return Response.json(out);
    }
    m = /^\/lfs\/([0-9a-f]{64})$/.exec(path);
    if (m && (req.method === "GET" || req.method === "HEAD")) {
      const repo = this.repos.get(url.searchParams.get("repo") ?? "");
      const f = repo?.files.get(url.searchParams.get("path") ?? "");
      if (!repo || !f || f.sha256 !== m[1] || url.searchParams.get("sig") !== this.signature(repo, f)) return new Response("AccessDenied", { status: 403 });
      entry.file = f.path;
      return this.body(req, f, { etag: `"${f.sha256}"` }, entry);
    }
    m = /^\/(.+?)\/resolve\/([^/]+)\/(.+)$/.exec(path);
    if (m && (req.method === "GET" || req.method === "HEAD")) {
      const r = this.repoAt(req, m[1]!, m[2]!);
      if ("error" in r) return r.error;
      const repo = r.repo;
      if (repo.gated && !this.authorized(req)) {
        return this.error(401, "GatedRepo", `Access to model ${repo.id} is restricted. You must have access to it and be authenticated to access it. Please log in.`);
      }
      const f = repo.files.get(m[3]!);
      if (!f) return this.error(404, "EntryNotFound", `${m[3]} does not exist`);
      const common = { "x-repo-commit": repo.commit };
      if (f.lfs) {
        const location = `${this.cdnUrl}/lfs/${f.sha256}?repo=${encodeURIComponent(repo.id)}&path=${encodeURIComponent(f.path)}&sig=${this.signature(repo, f)}`;
        return new Response(null, {
          status: 302,
          headers: { ...common, location, "x-linked-size": String(f.size), "x-linked-etag": `"${f.sha256}"`, etag: `"${this.entryJson(f).oid}"` },
        });
      }
      entry.file = f.path;
      return this.body(req, f, { ...common, etag: `"${f.gitOid}"` }, entry);
    }
    return this.error(404, null, `no route ${req.method} ${path}`);
  }

  /** Stands in for the CDN's signed URL: only a redirect from resolve knows it. */
  private signature(repo: StoredRepo, f: StoredFile): string {
    return createHash("sha256").update(`${repo.commit}:${f.sha256}`).digest("hex").slice(0, 16);
  }

  private body(req: Request, f: StoredFile, headers: Record<string, string>, entry: HubRequestLog): Response {
    const all = f.bytes();
    let start = 0;
    let end = f.size - 1;
    let status = 200;
    const asked = req.headers.get("range");
    const range = asked && asked !== "bytes=0-0" && this.faults.ignoreRange.has(f.path) ? null : asked;
    const h: Record<string, string> = { ...headers, "accept-ranges": "bytes", "content-type": "application/octet-stream" };
    if (range) {
      const r = /^bytes=(\d+)-(\d*)$/.exec(range);
      if (!r || Number(r[1]) >= f.size) return new Response(null, { status: 416, headers: { "content-range": `bytes */${f.size}` } });
      start = Number(r[1]);
      end = r[2] ? Math.min(Number(r[2]), f.size - 1) : f.size - 1;
      status = 206;
      h["content-range"] = `bytes ${start}-${end}/${f.size}`;
    }
    h["content-length"] = String(end - start + 1);
    if (req.method === "HEAD") return new Response(null, { status, headers: h });
    let slice = all.subarray(start, end + 1);
    if (this.faults.corrupt.has(f.path) && slice.byteLength > 0) {
      slice = slice.slice();
      slice[Math.floor(slice.byteLength / 2)]! ^= 0xff;
    }
    const isProbe = range === "bytes=0-0";
    const cut = isProbe ? undefined : this.faults.cutOnce.get(f.path);
    if (cut !== undefined) this.faults.cutOnce.delete(f.path);
    const hold = isProbe ? undefined : this.faults.hold.get(f.path);
    if (hold) this.faults.hold.delete(f.path);
    if (!isProbe) this.faults.beforeBody?.(f.path);
    const limit = cut === undefined ? slice.byteLength : Math.max(0, Math.min(slice.byteLength, cut - start));
    const rate = this.faults.bytesPerSecond;
    const chunk = 16 * 1024;
    let sent = 0;
    let held = false;
    const stream = new ReadableStream<Uint8Array>({
      pull: async (c) => {
        if (hold && !held && sent >= hold.after - start) {
          held = true;
          hold.reach();
          await hold.released;
        }
        if (sent >= limit) {
          // Ending short of Content-Length: the client sees the connection end mid-body.
          c.close();
          return;
        }
        let n = Math.min(chunk, limit - sent);
        if (hold && !held) n = Math.min(n, hold.after - start - sent);
        if (rate > 0) await Bun.sleep((n / rate) * 1000);
        c.enqueue(slice.subarray(sent, sent + n));
        sent += n;
        entry.bytes = sent;
      },
    });
    return new Response(stream, { status, headers: h });
  }
}

export function startHubServer(repos: HubRepoSpec[]): HubServer {
  return new HubServer(repos);
}
