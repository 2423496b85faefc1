// Structured JSON log lines on stderr. Callers pass fields, never prompt text or keys: those stay
// out unless the operator turns on SLUICE_LOG_PROMPTS (see `logPrompts`).

export type LogLevel = "debug" | "info" | "warn" | "error";
const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  /**
   * A line whose fields are already JSON object text (`{"key":value,…}`, without time, level or
   * msg): for the access line of the hottest route, which would otherwise build an object only to
   * serialise it. The line is the same as `info(msg, JSON.parse(fields))` would write.
   */
  json(level: LogLevel, msg: string, fields: string): void;
  child(fields: Record<string, unknown>): Logger;
  readonly logPrompts: boolean;
}

export interface LoggerOptions {
  level?: LogLevel;
  logPrompts?: boolean;
  write?: (line: string) => void;
  base?: Record<string, unknown>;
}

/** How long a line may wait in the buffer, and how much may wait, before it is written. */
const FLUSH_AFTER_MS = 20;
const FLUSH_AT_BYTES = 64 * 1024;

/**
 * Lines written to stderr in batches: at most FLUSH_AFTER_MS after the first waiting line, or
 * once FLUSH_AT_BYTES wait. An access line per request would otherwise cost a write call each,
 * and under load even one write per turn of the event loop was a quarter of the cost of a
 * /v1/models request. Errors, and whatever is pending at exit, go out at once.
 */
function stderrBatcher(): { write: (line: string) => void; flush: () => void } {
  let pending = "";
  let timer: ReturnType<typeof setTimeout> | null = null;
  const flush = () => {
    if (timer) clearTimeout(timer);
    timer = null;
    if (pending.length === 0) return;
    const text = pending;
    pending = "";
    process.stderr.write(text);
  };
  process.on("exit", flush);
  return {
    write(line) {
      pending += `${line}\n`;
      if (pending.length >= FLUSH_AT_BYTES) flush();
      else if (!timer) {
        timer = setTimeout(flush, FLUSH_AFTER_MS);
        // A waiting log line must not keep the process alive.
        timer.unref?.();
      }
    },
    flush,
  };
}

let sharedStderr: ReturnType<typeof stderrBatcher> | null = null;

/** Writes the log lines still waiting in the batch, so what is printed next comes after them. */
export function flushLogs(): void {
  sharedStderr?.flush();
}

// One ISO string per millisecond: under load, many lines (an access line per request) share it.
let isoAt = -1;
let iso = "";
function timestamp(): string {
  const t = Date.now();
  if (t !== isoAt) {
    isoAt = t;
    iso = new Date(t).toISOString();
  }
  return iso;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const min = ORDER[opts.level ?? "info"];
  const out = opts.write ? null : (sharedStderr ??= stderrBatcher());
  const write = opts.write ?? out!.write;
  const base = opts.base ?? {};
  const plain = Object.keys(base).length === 0;
  const emit = (level: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (ORDER[level] < min) return;
    const time = timestamp();
    if (plain && fields && !("time" in fields) && !("level" in fields) && !("msg" in fields)) {
      // The same line as below without building the merged record (the access line's case).
      const f = JSON.stringify(fields);
      const head = `{"time":"${time}","level":"${level}","msg":${JSON.stringify(msg)}`;
      write(f.length > 2 ? `${head},${f.slice(1)}` : `${head}}`);
    } else {
      write(JSON.stringify({ time, level, msg, ...base, ...fields }));
    }
    if (level === "error") out?.flush();
  };
  return {
    debug: (m, f) => emit("debug", m, f),
    info: (m, f) => emit("info", m, f),
    warn: (m, f) => emit("warn", m, f),
    error: (m, f) => emit("error", m, f),
    json: (level, msg, fields) => {
      if (ORDER[level] < min) return;
      if (!plain) return emit(level, msg, JSON.parse(fields) as Record<string, unknown>);
      write(`{"time":"${timestamp()}","level":"${level}","msg":${JSON.stringify(msg)}${fields.length > 2 ? `,${fields.slice(1)}` : "}"}`);
      if (level === "error") out?.flush();
    },
    child: (fields) => createLogger({ ...opts, base: { ...base, ...fields } }),
    logPrompts: opts.logPrompts ?? false,
  };
}

/** A logger that drops everything: for tests that do not look at logs. */
export const silentLogger = (): Logger => createLogger({ write: () => {} });
