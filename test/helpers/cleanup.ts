// Temporary directories made by fixtures that keep no handle on them (a helper returns a path),
// removed once every test file has run: test/preload.ts registers the removal as a global hook.
import { rmSync } from "node:fs";

const dirs: string[] = [];

export function removeAtEnd(dir: string): string {
  dirs.push(dir);
  return dir;
}

export function removeAll(): void {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
}
