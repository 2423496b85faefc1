// Watches the models directory so that a model placed there (by `sluice models pull`, or copied by
// hand) is served without a restart or SIGHUP. Events are debounced: a copy in progress keeps
// pushing the synchronisation back until it has been quiet for a moment. Hidden paths (a pull's
// .sluice-pull staging folder, editors' dot files) are ignored: a pull's model appears with the
// one rename that places it. File events are not delivered everywhere (network filesystems,
// some container overlays) and a directory swapped by renames can slip past a recursive
// watcher, so a cheap fingerprint of the directories (their ids, paths and stamps) is also
// compared every few seconds.
import { mkdirSync, watch } from "node:fs";

export const WATCH_DEBOUNCE_MS = 1000;
export const WATCH_POLL_MS = 5000;

export interface WatchOptions {
  onChange: () => void;
  onError: (e: Error) => void;
  /** Changes whenever what the scan would find changes. */
  fingerprint: () => string;
  debounceMs?: number;
  pollMs?: number;
}

export function watchModelsDir(dir: string, o: WatchOptions): () => void {
  mkdirSync(dir, { recursive: true });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const later = () => {
    clearTimeout(timer);
    timer = setTimeout(o.onChange, o.debounceMs ?? WATCH_DEBOUNCE_MS);
  };
  const watcher = watch(dir, { recursive: true }, (_event, name) => {
    const rel = String(name ?? "");
    if (!rel.split(/[\\/]/).some((s) => s.startsWith("."))) later();
  });
  watcher.on("error", o.onError);
  let last = o.fingerprint();
  const poll = setInterval(() => {
    try {
      const now = o.fingerprint();
      if (now !== last) later();
      last = now;
    } catch {
      // A directory swapped or removed mid-scan: the next round sees how it ended.
    }
  }, o.pollMs ?? WATCH_POLL_MS);
  return () => {
    clearTimeout(timer);
    clearInterval(poll);
    watcher.close();
  };
}
