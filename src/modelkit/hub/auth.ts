// Which Hub to talk to and with what token, read as huggingface_hub reads them, so an operator who
// has used `huggingface-cli login` (or `hf auth login`) needs nothing more.
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

export const PUBLIC_HUB = "https://huggingface.co";

type Env = Record<string, string | undefined>;

/** HF_ENDPOINT, else the public Hub; without a trailing slash. */
export function hubEndpoint(env: Env = process.env): string {
  const v = env.HF_ENDPOINT?.trim();
  return (v ? v : PUBLIC_HUB).replace(/\/+$/, "");
}

/** The token file huggingface_hub writes: HF_TOKEN_PATH, else $HF_HOME/token (HF_HOME defaults to ~/.cache/huggingface). */
export function hubTokenPath(env: Env = process.env): string {
  if (env.HF_TOKEN_PATH) return env.HF_TOKEN_PATH;
  const home = env.HF_HOME ?? join(env.XDG_CACHE_HOME ?? join(env.HOME ?? homedir(), ".cache"), "huggingface");
  return join(home, "token");
}

export interface HubToken {
  token: string;
  /** Where it came from, for messages (never the token itself). */
  source: string;
}

/** HF_TOKEN (or the older HUGGING_FACE_HUB_TOKEN), else the token file; null when there is none. */
export function hubToken(env: Env = process.env): HubToken | null {
  for (const name of ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"]) {
    const v = env[name]?.trim();
    if (v) return { token: v, source: name };
  }
  const path = hubTokenPath(env);
  if (existsSync(path)) {
    const v = readFileSync(path, "utf8").trim();
    if (v) return { token: v, source: path };
  }
  return null;
}
