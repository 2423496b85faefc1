// Admin: "Add a model from the Hub". The server runs the pull as a job (see the server's
// PullJobs); the form starts one, and pull-progress.js polls its state into a progress bar. Without
// script the form posts and the page lists the jobs with their state as of the last load.
import { formatBytes } from "../../format-bytes.ts";
import { ONNX_DTYPES } from "../../onnx-dtypes.ts";
import { PULL_PROGRESS_VERSION } from "../assets.ts";
import { html, type Html } from "../html.ts";
import { redirectWithFlash } from "../flash.ts";
import { json } from "../http.ts";
import { BASE } from "../layout.ts";
import type { HubPullStatus, Route, SignedCtx } from "../router.ts";

function jobView(j: HubPullStatus): Html {
  const total = Math.max(j.bytesTotal, 1);
  const value = j.state === "done" ? total : Math.min(j.bytesDone, total);
  return html`<div class="hub-job" data-job="${j.id}" data-state="${j.state}">
  <p><strong>${j.repo}</strong> <span class="muted">at ${j.revision}, dtype ${j.dtype}, as</span> <code>${j.modelId}</code> · <span class="hub-state">${j.state}</span></p>
  ${j.state === "failed" ? "" : html`<progress class="hub-progress" max="${total}" value="${value}" aria-label="Download of ${j.repo}"></progress>`}
  <p class="hub-bytes muted">${j.bytesTotal ? `${formatBytes(j.bytesDone)} of ${formatBytes(j.bytesTotal)}` : ""}${j.file ? ` · ${j.file}` : ""}</p>
  <p class="hub-message" role="status">${j.state === "failed" ? "" : j.message}</p>
  <p class="hub-error notice error" role="alert"${j.error ? "" : html` hidden`}>${j.error ?? ""}</p>
</div>`;
}

/** The admin page's section; empty when the server offers no pulls. */
export function hubPullPanel(c: SignedCtx, csrf: Html): Html | "" {
  const pulls = c.opts.hubPulls;
  if (!pulls) return "";
  // The section's own style and script come first: the panel ends with its content.
  return html`<section class="panel" id="hub"><link rel="stylesheet" href="${BASE}/assets/pull-progress.css?v=${PULL_PROGRESS_VERSION}"><script src="${BASE}/assets/pull-progress.js?v=${PULL_PROGRESS_VERSION}" defer></script><h2>Add a model from the Hub</h2>
  <p class="muted">Fetches an ONNX export (transformers.js or onnxruntime-genai layout) into the models directory: its configs, tokenizer and one dtype's graphs, checked against the Hub's SHA-256; or weights it converts: a safetensors checkpoint, or one GGUF file, named as <code>REPO:QUANT</code> (<code>Qwen/Qwen3-0.6B-GGUF:Q8_0</code>, as llama.cpp and Ollama take it; Q4_K_M when no quantisation is given). The model is served as soon as it is complete. Gated repositories need <code>HF_TOKEN</code> in the server's environment.</p>
  <form class="inline" id="hub-pull-form" method="post" action="${BASE}/admin/hub-pull" data-api="${BASE}/api/hub-pulls">${csrf}
    <div class="field grow"><label for="hub-repo">Repository (or REPO:QUANT for a GGUF file)</label><input id="hub-repo" name="repo" required placeholder="onnx-community/Qwen3-0.6B-ONNX" autocomplete="off" spellcheck="false"></div>
    <div class="field"><label for="hub-revision">Revision</label><input id="hub-revision" name="revision" value="main" autocomplete="off" spellcheck="false"></div>
    <div class="field"><label for="hub-dtype">Dtype</label><select id="hub-dtype" name="dtype"><option value="auto">auto (by device)</option>${ONNX_DTYPES.map((d) => html`<option>${d}</option>`)}</select></div>
    <button type="submit">Pull</button></form>
  <p id="hub-pull-error" class="notice error" role="alert" hidden></p>
  <div id="hub-pulls">${pulls.list().map(jobView)}</div>
</section>`;
}

const statusJson = (j: HubPullStatus) => ({
  id: j.id,
  repo: j.repo,
  revision: j.revision,
  dtype: j.dtype,
  model: j.modelId,
  state: j.state,
  message: j.message,
  error: j.error,
  bytes_done: j.bytesDone,
  bytes_total: j.bytesTotal,
  file: j.file,
  html: jobView(j).value,
});

function start(c: SignedCtx): HubPullStatus {
  const pulls = c.opts.hubPulls;
  if (!pulls) throw new Error("this server does not pull models from the Hub");
  const job = pulls.start({ repo: c.field("repo"), revision: c.field("revision"), dtype: c.field("dtype") });
  c.opts.log.info("workspace admin change", { by: c.user.email, change: `pull ${job.repo}@${job.revision} (${job.dtype}) as ${job.modelId}` });
  return job;
}

export const hubPullRoutes: Route[] = [
  {
    method: "POST",
    path: "/admin/hub-pull",
    access: "operator",
    handle(c) {
      try {
        const job = start(c);
        return redirectWithFlash(c, `${BASE}/admin#hub`, { ok: `pulling ${job.repo}: reload this page to follow it` });
      } catch (e) {
        return redirectWithFlash(c, `${BASE}/admin#hub`, { error: `The pull could not start: ${(e as Error).message}` });
      }
    },
  },
  {
    method: "POST",
    path: "/api/hub-pulls",
    access: "operator",
    handle(c) {
      try {
        return json(statusJson(start(c)), 202);
      } catch (e) {
        return json({ error: (e as Error).message }, 400);
      }
    },
  },
  {
    method: "GET",
    path: "/api/hub-pulls",
    access: "operator",
    handle: (c) => json({ data: (c.opts.hubPulls?.list() ?? []).map(statusJson) }),
  },
  {
    method: "GET",
    path: "/api/hub-pulls/:id",
    access: "operator",
    handle(c) {
      const j = c.opts.hubPulls?.get(c.params.id!);
      return j ? json(statusJson(j)) : json({ error: "no such pull" }, 404);
    },
  },
];
