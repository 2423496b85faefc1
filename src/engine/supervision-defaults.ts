// The defaults of the engine's protections, apart from the engine itself: serve's --help shows
// them, and every other command starts without loading the engine's modules.

export interface SupervisionOptions {
  /** This many crashes within `crashLoopWindowMs` make a crash loop: the model becomes unavailable. */
  crashLoopCrashes: number;
  crashLoopWindowMs: number;
  /** The first pause of an unavailable model before its next start; doubles up to maxUnavailableMs. */
  unavailableMs: number;
  maxUnavailableMs: number;
  /** A worker that answers nothing for this long while requests wait for it is restarted. */
  stallMs: number;
  /** The longest a request waits for its model's worker to accept it. */
  admissionMs: number;
}

export const DEFAULT_SUPERVISION: SupervisionOptions = {
  crashLoopCrashes: 3,
  crashLoopWindowMs: 60_000,
  unavailableMs: 30_000,
  maxUnavailableMs: 600_000,
  stallMs: 60_000,
  admissionMs: 120_000,
};

export const DEFAULT_GRAMMAR_CACHE_BYTES = 16 * 1024 * 1024;
