// Watches the models directory so that a model placed there (by `sluice models pull`, or copied by
// hand) is served without a restart or SIGHUP. Events are debounced: a copy in progress keeps
// pushing the synchronisation back until it has been quiet for a moment. Hidden paths (a pull's
// .sluice-pull staging folder, editors' dot files) are ignored: a pull's model appears with the
// one rename that places it.
import { mkdirSync, watch } from "node:fs";

export const WATCH_DEBOUNCE_MS = 1000;

export function watchModelsDir(dir: string, onChange: () => void, onError: (e: Error) => void, debounceMs = WATCH_DEBOUNCE_MS): () => void {
  mkdirSync(dir, { recursive: true });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const watcher = watch(dir, { recursive: true }, (_event, name) => {
    const rel = String(name ?? "");
    if (rel.split(/[\\/]/).some((s) => s.startsWith("."))) return;
    clearTimeout(timer);
    timer = setTimeout(onChange, debounceMs);
  });
  watcher.on("error", onError);
  return () => {
    clearTimeout(timer);
    watcher.close();
  };
}
