// Pulls that a running server makes for its admin page: each is a job whose state (bytes, file,
// outcome in words) the page polls. The job places the model and then asks the server to
// synchronise its catalog, so the model is served without a restart.
import type { HubToken } from "./auth.ts";
import { PullError } from "./errors.ts";
import { defaultPullId, pullModel, validatePullOptions } from "./pull.ts";
import type { Device, DTypeChoice } from "./select.ts";

export type PullJobState = "running" | "done" | "failed";

export interface PullJobStatus {
  id: string;
  repo: string;
  revision: string;
  dtype: string;
  modelId: string;
  state: PullJobState;
  /** What is happening or happened, in words. */
  message: string;
  /** Why it failed, in words; null unless failed. */
  error: string | null;
  bytesDone: number;
  bytesTotal: number;
  file: string | null;
  startedAt: number;
  endedAt: number | null;
}

export interface PullJobsOptions {
  modelsDir: string;
  endpoint: string;
  /** Read at each pull, so a token file written later counts. */
  token: () => HubToken | null;
  device: Device;
  /** Called once the model is in place; resolves with why it cannot be served, or null. */
  onPlaced: (modelId: string) => Promise<string | null>;
  /** Jobs kept for the page after they end. */
  keep?: number;
}

export class PullJobs {
  private readonly jobs = new Map<string, PullJobStatus>();
  private seq = 0;

  constructor(private readonly opts: PullJobsOptions) {}

  /** Starts a pull; throws a PullError (in words) when the request is wrong or the model is being pulled. */
  start(req: { repo: string; revision?: string; dtype?: string; id?: string }): PullJobStatus {
    const repo = req.repo.trim();
    const revision = req.revision?.trim() || "main";
    const dtype = (req.dtype?.trim() || "auto") as DTypeChoice;
    const modelId = req.id?.trim() || defaultPullId(repo);
    validatePullOptions({ repo, dtype, id: modelId });
    for (const j of this.jobs.values()) {
      if (j.state === "running" && j.modelId === modelId) throw new PullError("busy", `${modelId} is already being pulled`);
    }
    const job: PullJobStatus = {
      id: `pull-${++this.seq}`,
      repo,
      revision,
      dtype,
      modelId,
      state: "running",
      message: `asking ${this.opts.endpoint} for ${repo}`,
      error: null,
      bytesDone: 0,
      bytesTotal: 0,
      file: null,
      startedAt: Date.now(),
      endedAt: null,
    };
    this.jobs.set(job.id, job);
    this.trim();
    void this.run(job, dtype);
    return { ...job };
  }

  get(id: string): PullJobStatus | null {
    const j = this.jobs.get(id);
    return j ? { ...j } : null;
  }

  /** Newest first. */
  list(): PullJobStatus[] {
    return [...this.jobs.values()].reverse().map((j) => ({ ...j }));
  }

  private trim(): void {
    const keep = this.opts.keep ?? 20;
    for (const [id, j] of this.jobs) {
      if (this.jobs.size <= keep) break;
      if (j.state !== "running") this.jobs.delete(id);
    }
  }

  private async run(job: PullJobStatus, dtype: DTypeChoice): Promise<void> {
    try {
      await pullModel({
        repo: job.repo,
        revision: job.revision,
        dtype,
        id: job.modelId,
        modelsDir: this.opts.modelsDir,
        endpoint: this.opts.endpoint,
        token: this.opts.token(),
        device: this.opts.device,
        onEvent: (e) => {
          if (e.type === "resolved") {
            job.bytesTotal = e.totalBytes;
            job.message = `${e.note}; ${e.files.length} files`;
          } else if (e.type === "progress") {
            job.bytesDone = e.totalDone;
            job.file = e.path;
          } else if (e.type === "retry") {
            job.message = `retrying ${e.path} (attempt ${e.attempt}): ${e.reason}`;
          } else if (e.type === "placed") {
            job.message = `placed in ${e.dir}; loading it`;
          }
        },
      });
      const problem = await this.opts.onPlaced(job.modelId);
      if (problem) {
        job.state = "failed";
        job.error = `${job.repo} was pulled into the models directory, but the server cannot load it: ${problem}`;
      } else {
        job.state = "done";
        job.message = `${job.repo} is served as ${job.modelId}`;
      }
    } catch (e) {
      job.state = "failed";
      job.error = e instanceof PullError ? e.message : `the pull failed: ${(e as Error).message}`;
    } finally {
      job.file = null;
      job.endedAt = Date.now();
    }
  }
}
