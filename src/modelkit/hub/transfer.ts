// One file from the Hub onto disk: under a temporary name, resumed with a Range request from
// whatever an earlier attempt or run left, retried with backoff when the transfer fails or
// stalls, and checked against the Hub's hash (SHA-256 for LFS files, the git blob id otherwise)
// before it takes its real name.
import { existsSync, readFileSync, renameSync, statSync, unlinkSync, writeFileSync } from "node:fs";
import { open } from "node:fs/promises";
import { HubApiError } from "@huggingface/hub";
import type { HubClient, RepoFile, ResponseInfo } from "./client.ts";
import { formatBytes } from "../../format-bytes.ts";
import { isDiskFull, PullError } from "./errors.ts";

export interface TransferOptions {
  /** A transfer that receives nothing for this long is cut and resumed. */
  stallMs: number;
  /** Consecutive failed attempts (ones that added no byte) before giving up. */
  retries: number;
  /** Wait before retry number `attempt` (1-based). */
  backoffMs(attempt: number): number;
  signal?: AbortSignal;
  /** Bytes of the file on disk so far (resumed bytes included). */
  onProgress?(done: number): void;
  onRetry?(attempt: number, delayMs: number, reason: string): void;
}

export interface TransferResult {
  /** Bytes received in this run (less than the size when it resumed). */
  transferred: number;
  /** Where this run started: bytes a previous run had left in the temporary file. */
  resumedFrom: number;
}

export const defaultBackoff = (attempt: number) => Math.min(30_000, 1000 * 2 ** (attempt - 1));

/** Recorded beside a partial file so that a later run resumes only the same content. */
interface PartMeta {
  size: number;
  sha256: string | null;
  gitOid: string | null;
}

const partOf = (dest: string) => `${dest}.part`;
const metaOf = (dest: string) => `${dest}.part.json`;

type Hasher = InstanceType<typeof Bun.CryptoHasher>;

function newHasher(file: RepoFile): Hasher {
  if (file.sha256) return new Bun.CryptoHasher("sha256");
  const h = new Bun.CryptoHasher("sha1");
  h.update(`blob ${file.size}\0`);
  return h;
}

function expected(file: RepoFile): string | null {
  return file.sha256 ?? file.gitOid;
}

async function hashInto(h: Hasher, path: string): Promise<void> {
  const reader = Bun.file(path).stream().getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    h.update(value);
  }
}

/** Whether the file at `path` is exactly the repository's (size and hash). */
export async function fileMatches(path: string, file: RepoFile): Promise<boolean> {
  if (!existsSync(path) || statSync(path).size !== file.size) return false;
  const want = expected(file);
  if (!want) return false;
  const h = newHasher(file);
  await hashInto(h, path);
  return h.digest("hex") === want;
}

function removePartial(dest: string): void {
  for (const p of [partOf(dest), metaOf(dest)]) if (existsSync(p)) unlinkSync(p);
}

/** Bytes a previous run left for this same content, or 0 (a stale partial is removed). */
export function resumableBytes(dest: string, file: RepoFile): number {
  const part = partOf(dest);
  if (!existsSync(part)) return 0;
  try {
    const meta = JSON.parse(readFileSync(metaOf(dest), "utf8")) as PartMeta;
    const size = statSync(part).size;
    if (meta.size === file.size && meta.sha256 === file.sha256 && meta.gitOid === file.gitOid && size <= file.size) return size;
  } catch {
    // No or unreadable metadata: the partial cannot be trusted.
  }
  removePartial(dest);
  return 0;
}

class Stalled extends Error {}
class ShortBody extends Error {}
/** The local file could not be written: not a network failure, so not retried. */
class WriteFailure extends Error {
  constructor(override readonly cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause));
  }
}

/** Errors worth another attempt: the network, a stall, a cut body, the Hub's 5xx and 429. */
function retryable(e: unknown): boolean {
  if (e instanceof PullError || e instanceof WriteFailure) return false;
  if (e instanceof HubApiError) return e.statusCode >= 500 || e.statusCode === 408 || e.statusCode === 429;
  return true;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      reject(new PullError("cancelled", "the pull was cancelled"));
    }, { once: true });
  });
}

/** Downloads `file` to `dest`, resuming `dest.part` when it holds the start of the same content. */
export async function transferFile(client: HubClient, file: RepoFile, dest: string, opts: TransferOptions): Promise<TransferResult> {
  const part = partOf(dest);
  const resumedFrom = resumableBytes(dest, file);
  if (resumedFrom === 0) writeFileSync(metaOf(dest), JSON.stringify({ size: file.size, sha256: file.sha256, gitOid: file.gitOid } satisfies PartMeta));
  let hasher = newHasher(file);
  if (resumedFrom > 0) await hashInto(hasher, part);
  let written = resumedFrom;
  let transferred = 0;
  let failures = 0;
  opts.onProgress?.(written);

  const fh = await open(part, "a");
  try {
    while (written < file.size) {
      const before = written;
      try {
        await attempt();
      } catch (e) {
        if (opts.signal?.aborted) throw new PullError("cancelled", "the pull was cancelled");
        if (e instanceof WriteFailure) throw isDiskFull(e.cause) ? diskFull(dest, file, written) : new PullError("usage", `cannot write ${part}: ${e.message}`);
        if (!retryable(e)) throw client.failure(e, file.path);
        failures = written > before ? 1 : failures + 1;
        if (failures > opts.retries) {
          const f = e instanceof Stalled || e instanceof ShortBody ? new PullError("network", `${file.path}: ${reason(e)}`) : client.failure(e, file.path);
          throw new PullError(f.kind, `${f.message} (after ${opts.retries} retries; ${formatBytes(written)} of ${formatBytes(file.size)} are kept and the next pull resumes from there)`);
        }
        const delay = opts.backoffMs(failures);
        opts.onRetry?.(failures, delay, reason(e));
        await sleep(delay, opts.signal);
      }
    }
  } finally {
    await fh.close();
  }

  const want = expected(file);
  const got = hasher.digest("hex");
  if (want && got !== want) {
    removePartial(dest);
    throw new PullError(
      "checksum",
      `checksum mismatch for ${file.path}: the Hub's ${file.sha256 ? "SHA-256" : "git blob id"} is ${want} but the received bytes hash to ${got}; the download was discarded and no model was placed (run the pull again; if it fails the same way, something between here and the Hub alters the data)`,
    );
  }
  renameSync(part, dest);
  unlinkSync(metaOf(dest));
  return { transferred, resumedFrom };

  /** One request from `written` on; returns when the body ends or throws. */
  async function attempt(): Promise<void> {
    const ctrl = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const watchdog = () => {
      clearTimeout(timer);
      timer = setTimeout(() => ctrl.abort(new Stalled(`no data for ${opts.stallMs < 10_000 ? (opts.stallMs / 1000).toFixed(1) : Math.round(opts.stallMs / 1000)} s`)), opts.stallMs);
    };
    let last: ResponseInfo | null = null;
    const stopped = new Promise<never>((_, reject) => ctrl.signal.addEventListener("abort", () => reject(ctrl.signal.reason), { once: true }));
    stopped.catch(() => {});
    watchdog();
    try {
      const from = written;
      const stream = await Promise.race([client.body(file.path, from, file.size, client.fetchFor(ctrl.signal, (r) => (last = r))), stopped]);
      const reader = stream.getReader();
      let first = true;
      try {
        for (;;) {
          const { value, done } = await Promise.race([reader.read(), stopped]);
          if (done) break;
          watchdog();
          if (first && from > 0 && (last as ResponseInfo | null)?.status === 200) {
            // The server ignored the Range header and sent the whole file: start over with it.
            await fh.truncate(0);
            hasher = newHasher(file);
            written = 0;
          }
          first = false;
          if (written + value.byteLength > file.size) {
            removePartial(dest);
            throw new PullError("checksum", `${file.path}: the Hub sent more than the ${file.size} bytes it lists; the download was discarded`);
          }
          await writeAll(value);
          hasher.update(value);
          written += value.byteLength;
          transferred += value.byteLength;
          opts.onProgress?.(written);
        }
      } finally {
        reader.cancel().catch(() => {});
      }
      if (written < file.size) throw new ShortBody(`the connection closed after ${formatBytes(written)} of ${formatBytes(file.size)}`);
    } finally {
      clearTimeout(timer);
      if (!ctrl.signal.aborted) ctrl.abort(new Error("done"));
    }
  }

  async function writeAll(chunk: Uint8Array): Promise<void> {
    let off = 0;
    try {
      while (off < chunk.byteLength) {
        const { bytesWritten } = await fh.write(chunk, off, chunk.byteLength - off);
        off += bytesWritten;
      }
    } catch (e) {
      throw new WriteFailure(e);
    }
  }
}

function reason(e: unknown): string {
  if (e instanceof HubApiError) return `the Hub answered ${e.statusCode}`;
  return e instanceof Error ? e.message.split(". For more information")[0]! : String(e);
}

function diskFull(dest: string, file: RepoFile, written: number): PullError {
  return new PullError(
    "disk_full",
    `disk full while writing ${file.path} (${formatBytes(written)} of ${formatBytes(file.size)} written to ${partOf(dest)}): free some space and pull again to resume, or delete that folder to give the space back`,
  );
}
