// Whether any connection (this process or another) may have committed to a WAL database since the
// last look, without a syscall: SQLite's wal-index header in the "-shm" file, mapped into memory.
//
// Every commit rewrites that header (change counter, frame count, checksums, and on a WAL restart
// the salts), and every connection to the database maps the same file, so comparing it with a
// copy taken before the last real read tells "unchanged" exactly. A torn read during a commit only ever
// looks "changed" (the caller then reads through SQLite, which locks properly). The layout is
// SQLite's documented wal-index format (https://www.sqlite.org/walformat.html, version 3007000).
//
// Why not a query: any read through SQLite, even `PRAGMA data_version`, is a read transaction with
// two fcntl lock calls on the -shm file; on the hot path that was most of a cached request's cost.
import type { Database } from "bun:sqlite";
import { existsSync, statSync } from "node:fs";

/** The header is two 48-byte copies; the first is the one readers trust once both agree. */
const HEADER_WORDS = 12;
// Words of the first copy that every commit changes: iChange (a counter bumped per transaction),
// mxFrame (the last valid frame) and the two words of the header's own checksum, which covers
// everything before it (page size, database size, frame checksums, salts).
const I_CHANGE = 2;
const MX_FRAME = 4;
const CKSUM_0 = 10;
const CKSUM_1 = 11;
const WALINDEX_VERSION = 3007000;

export interface WalIndexWatch {
  /** True when the header moved since `mark` (always true before the first mark). */
  moved(): boolean;
  /** Remembers the header as it is now; call it before the read whose result you keep. */
  mark(): void;
  /** Stops looking (before the connection closes: SQLite may then unlink or truncate the file). */
  close(): void;
}

/**
 * A watch on the database's wal-index, or null when there is none to watch (in-memory database,
 * not in WAL mode, no -shm file yet, an unknown header version): callers then read every time.
 */
export function watchWalIndex(db: Database): WalIndexWatch | null {
  const file = db.filename;
  if (!file || file === ":memory:" || file.startsWith("file:")) return null;
  const shm = `${file}-shm`;
  try {
    const mode = db.query<{ journal_mode: string }, []>("PRAGMA journal_mode").get()?.journal_mode;
    if (mode?.toLowerCase() !== "wal" || !existsSync(shm) || statSync(shm).size < 4096) return null;
    // MAP_SHARED: the same pages the writers' mappings write to. Only the first page is needed.
    const bytes = Bun.mmap(shm, { shared: true, size: 4096 });
    let words: Uint32Array | null = new Uint32Array(bytes.buffer, bytes.byteOffset, HEADER_WORDS);
    // isInit (byte 12) is 1 once a connection has built the index.
    if (words[0] !== WALINDEX_VERSION || bytes[12] !== 1) return null;
    const seen = new Uint32Array(HEADER_WORDS);
    let marked = false;
    return {
      moved() {
        if (!words || !marked) return true;
        return words[I_CHANGE] !== seen[I_CHANGE] || words[MX_FRAME] !== seen[MX_FRAME] || words[CKSUM_0] !== seen[CKSUM_0] || words[CKSUM_1] !== seen[CKSUM_1];
      },
      mark() {
        if (!words) return;
        seen.set(words);
        marked = true;
      },
      close() {
        // The mapping goes with the garbage collector; it is never read again.
        words = null;
      },
    };
  } catch {
    return null;
  }
}
