// When to speculate and how far. A verification run of w tokens per row costs more than a decode
// step; what it buys is the draft tokens the model accepts. Two levels, both measured on this
// machine as it runs:
//
// - Per round, the width: the one that maximises expected tokens per unit of time,
//
//     tokens(w) = Σ rows (1 + a + a² + … + a^k),  k = min(the row's draft, w - 1)
//     time(w)   = the measured cost of a run of w tokens per row at this batch size
//               + the round's other fixed work + the per-token work (sampling, detokenising) × tokens(w)
//
//   where a is the chance that a draft token is accepted, learnt per choice and, as a prior, per
//   length of the matched ending.
// - Per batch size, the regime: speculating (every run on the general graph, its width chosen as
//   above) or plain decode steps (the one-token graph of a small model). A run's cost depends on
//   which graph ran before it (caches), so the two are compared as wholes: time per generated
//   token over windows of rounds in each, the better one kept, the other tried again now and then
//   (less often while it keeps losing; a trial of speculation that the last measured costs and the
//   drafts' acceptance since predict to lose clearly is skipped, never twice in a row). In a full batch a decode step already serves many rows
//   for little more than one, so speculation rarely pays and the planner stays with plain steps
//   by itself; with one stream and a repetitive text it goes wide.
import { NgramDrafter, MAX_MATCH, type Draft } from "./ngram.ts";

/** Draft tokens verified per row at most. */
export const MAX_DRAFT = 8;

/** A choice's draft tokens were accepted (or not) so often: counts that fade with age. */
export class Acceptance {
  private accepted = 0;
  private rejected = 0;

  constructor(private readonly keep: number) {}

  observe(accepted: number, rejected: number): void {
    this.accepted = this.accepted * this.keep + accepted;
    this.rejected = this.rejected * this.keep + rejected;
  }

  /** The acceptance rate, with `prior` counting as `weight` observations. */
  rate(prior: number, weight: number): number {
    return (this.accepted + prior * weight) / (this.accepted + this.rejected + weight);
  }
}

/**
 * A low quantile (by default the median) of the last few samples. On a busy machine a run that
 * the operating system preempted, or that a garbage collection held up, takes many times its
 * cost, and such spikes come in bursts: a mean follows them, and so does a median when they are
 * frequent. What compares two widths is the cost of their runs when they do run.
 */
class RecentQuantile {
  private readonly samples: number[] = [];
  private next = 0;
  private cached: number | null = 0;

  constructor(
    private readonly size: number,
    private readonly quantile = 0.5,
  ) {}

  add(x: number): void {
    if (this.samples.length < this.size) this.samples.push(x);
    else this.samples[this.next] = x;
    this.next = (this.next + 1) % this.size;
    this.cached = null;
  }

  /** Computed when read (plain rounds add samples but do not read them). */
  get value(): number {
    if (this.cached === null) {
      const sorted = this.samples.slice().sort((a, b) => a - b);
      this.cached = sorted[Math.floor((sorted.length - 1) * this.quantile)]!;
    }
    return this.cached;
  }
}

/** A choice's speculation state: its text for lookups and how well its drafts did. */
export class ChoiceSpeculation {
  readonly acceptance = new Acceptance(0.8);
  constructor(readonly drafter: NgramDrafter) {}
}

export interface PlanRow {
  spec: ChoiceSpeculation;
  /** Draft tokens this row may take (its completion budget and cache room after the fed token). */
  room: number;
  /** Positions the row may still grow by: bounds the run's width, whose padding lands there. */
  space: number;
}

export interface Plan {
  /** Tokens per row in the verification run (fed token + drafts). */
  width: number;
  /** Per row, the draft tokens after its fed token (at most width - 1; may be none). */
  drafts: number[][];
  /** Per row, the length of the ending its draft continues. */
  matches: number[];
}

/** Expected tokens from a draft of k tokens each accepted with probability a, plus the model's own. */
export function expectedTokens(a: number, k: number): number {
  if (k <= 0) return 1;
  const r = Math.min(Math.max(a, 0), 0.999);
  return (1 - r ** (k + 1)) / (1 - r);
}

/** Batch sizes up to 4 alone, then in bins about a third wide. */
const ROW_BOUNDS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512];

function rowBin(rows: number): number {
  for (let i = 0; i < ROW_BOUNDS.length; i++) if (rows <= ROW_BOUNDS[i]!) return i;
  return ROW_BOUNDS.length;
}

/** Measured milliseconds of the model's runs by batch size (binned) and width. */
export class StepCosts {
  private readonly cells = new Map<number, RecentQuantile>();

  private key(rows: number, width: number): number {
    return rowBin(rows) * 32 + width;
  }

  record(rows: number, width: number, ms: number): void {
    const k = this.key(rows, width);
    let cell = this.cells.get(k);
    if (!cell) this.cells.set(k, (cell = new RecentQuantile(16, 0.25)));
    cell.add(ms);
  }

  /** Drops what was measured at this batch size's bin (stale: the regime did not run for a while). */
  forget(rows: number): void {
    const bin = rowBin(rows);
    for (let w = 1; w <= MAX_DRAFT + 1; w++) this.cells.delete(bin * 32 + w);
  }

  private measured(bin: number, width: number): number | null {
    const cell = this.cells.get(bin * 32 + width);
    return cell ? cell.value : null;
  }

  /**
   * The expected cost of a run; null when no run of this batch size has been measured. A width
   * not measured here is estimated along a line through the two nearest measured widths (never
   * falling with width), or from one measured width and the ratio between the two widths at the
   * nearest batch size that ran both, or else as a little dearer per extra token: optimistic, so
   * that it gets tried.
   */
  estimate(rows: number, width: number): number | null {
    const bin = rowBin(rows);
    const exact = this.measured(bin, width);
    if (exact !== null || width === 0) return exact;
    const known: [number, number][] = [];
    for (let w = 1; w <= MAX_DRAFT + 1; w++) {
      const c = this.measured(bin, w);
      if (c !== null) known.push([w, c]);
    }
    if (known.length === 0) return null;
    known.sort((x, y) => Math.abs(x[0] - width) - Math.abs(y[0] - width) || x[0] - y[0]);
    const [w1, c1] = known[0]!;
    if (known.length >= 2) {
      const [w2, c2] = known[1]!;
      const slope = Math.max(0, (c2 - c1) / (w2 - w1));
      return Math.max(0, c1 + slope * (width - w1));
    }
    for (let d = 1; d < ROW_BOUNDS.length; d++) {
      for (const b of [bin - d, bin + d]) {
        const [there, base] = [this.measured(b, width), this.measured(b, w1)];
        if (there !== null && base !== null) return (c1 * there) / base;
      }
    }
    return c1 * Math.max(0.5, 1 + 0.08 * (width - w1));
  }
}

/**
 * Rounds a regime is measured over, all of them, each from its start to the next round's: the
 * whole of the scheduler's cycle (the first rounds after a switch pay for the other graph's cold
 * caches, which a regime that keeps switching pays in earnest). Per-width run costs leave the
 * first SETTLE out: they compare widths within a regime.
 */
const WINDOW = 32;
const SETTLE = 4;
/** Rounds in the preferred regime before the other is tried again: at first, and at most. */
const FIRST_PROBE = 48;
const MAX_PROBE_INTERVAL = 4096;
/** Speculation replaces plain steps only when it measured this much faster: the measurements are noisy. */
const MARGIN = 0.1;
/**
 * A trial of speculation that is this much slower than plain steps after EARLY_LOOK rounds ends
 * there, lost like any other (the next one comes twice as late): in a full batch every trial
 * round costs (a run over 16 rows of stories260K verifying drafts took 1.5× a plain step's time
 * per token), and the doubling intervals alone left some 6% of a 2,600-round run speculating.
 */
const CLEAR_LOSS = 0.3;
const EARLY_LOOK = 3 * SETTLE;
/** Verification rounds between probes of a neighbouring width. */
const NEIGHBOUR_EVERY = 16;
/** The width tried where no cost is known yet at this batch size. */
const FIRST_WIDTH = 4;
/** Among plain rounds, one in this many checks how a one-token draft would have done, on up to SHADOW_ROWS rows. */
const SHADOW_EVERY = 4;
const SHADOW_ROWS = 4;
/** Predicted speed-up from the drafts' measured acceptance that brings speculation's trial forward. */
const EARLY_TRIAL_GAIN = 1.25;
/**
 * Predicted speed-up below which a trial that falls due is skipped (counted as lost, the next one
 * twice as late), once a trial has measured verification at this batch size. In a full batch of
 * stories260K a verification run cost 3.2 plain steps, and the trials' 31 rounds in 2,500 cost
 * about 2.5% of the time. At most every other trial is skipped: the costs are measured again.
 */
const SKIP_TRIAL_GAIN = 0.8;

export type Regime = "plain" | "speculate";

/** What one batch size's rounds have shown of the two regimes. */
class RegimeChoice {
  /** Plain decode steps until speculation has measured faster (or what the nearest batch size found). */
  preferred: Regime = "plain";
  /** Whether a trial has compared the two regimes at this batch size yet. */
  decided = false;
  /** Rounds left in a trial of the other regime (0: in the preferred one). */
  trial = 0;
  untilTrial = FIRST_PROBE;
  interval = FIRST_PROBE;
  /** Rounds since the last trial ended. */
  sinceTrial = 0;
  /** Speculation won a trial: it must win the next one, soon after, before it replaces plain steps. */
  confirming = false;
  /** The last trial that fell due was skipped (see SKIP_TRIAL_GAIN). */
  private skipped = false;
  /** Time per generated token, ms, as last measured over a window, per regime. */
  readonly msPerToken: Record<Regime, number | null> = { plain: null, speculate: null };
  /** How one-token drafts fared during plain rounds (see SpeculationPlanner.shadowRows). */
  readonly shadow = new Acceptance(0.95);
  shadowSeen = 0;
  private window: { ms: number; tokens: number }[] = [];
  /** Set when a trial has just begun (the planner then forgets stale verification costs). */
  trialStarted = false;

  get current(): Regime {
    return this.trial > 0 ? (this.preferred === "plain" ? "speculate" : "plain") : this.preferred;
  }

  /** Time per token over the window's rounds, leaving out those far slower than its typical round (interrupted). */
  private windowMsPerToken(): number {
    const per = this.window.map((r) => r.ms).sort((a, b) => a - b);
    const limit = 3 * per[per.length >> 1]!;
    let [ms, tokens] = [0, 0];
    for (const r of this.window) if (r.ms <= limit) [ms, tokens] = [ms + r.ms, tokens + r.tokens];
    return ms / tokens;
  }

  /** `mayWin(rows)`: whether a trial of speculation falling due now at `rows` rows could win (see SKIP_TRIAL_GAIN). */
  constructor(private readonly mayWin: (rows: number) => boolean = () => true) {}

  /** A round of `rows` rows in the current regime: its whole cycle's time and the tokens it made. */
  record(ms: number, tokens: number, rows: number): void {
    const regime = this.current;
    this.window.push({ ms, tokens });
    if (this.window.length >= WINDOW) {
      const measured = this.windowMsPerToken();
      const old = this.msPerToken[regime];
      // A trial's window stands alone: what came before it is from another time.
      this.msPerToken[regime] = old === null || this.trial > 0 ? measured : old + 0.5 * (measured - old);
      this.window = [];
    }
    if (this.trial > 0) {
      const kept = this.msPerToken.plain;
      const early = regime === "speculate" && kept !== null && this.window.length === EARLY_LOOK;
      if (early && this.windowMsPerToken() > kept * (1 + CLEAR_LOSS)) {
        // Clearly slower already: the rest of the trial would only cost.
        this.endTrialLost();
        return;
      }
      if (--this.trial > 0) return;
      this.window = [];
      this.decide();
      return;
    }
    this.sinceTrial++;
    if (--this.untilTrial > 0) return;
    // Skipped as a lost trial, without its cost (trialSoon may still bring the next one forward);
    // never twice in a row, since the costs it goes by are as old as the last trial.
    if (this.preferred === "plain" && !this.skipped && !this.mayWin(rows)) {
      this.skipped = true;
      this.interval = Math.min(this.interval * 2, MAX_PROBE_INTERVAL);
      this.untilTrial = this.interval;
      return;
    }
    this.skipped = false;
    this.startTrial();
  }

  private startTrial(): void {
    this.trial = WINDOW;
    this.window = [];
    this.trialStarted = true;
  }

  /**
   * Ends a trial of speculation as lost: the planner, with the costs and acceptance measured in
   * it, finds no draft worth verifying (its best width is 1, a plain step on the dearer general
   * graph), so the rest of the trial would measure nothing but that.
   */
  giveUpTrial(): void {
    if (this.trial > 0 && this.preferred === "plain" && this.window.length >= SETTLE) this.endTrialLost();
  }

  /** Ends the running trial of speculation before its time, as measured so far and lost. */
  private endTrialLost(): void {
    this.msPerToken.speculate = this.windowMsPerToken();
    this.trial = 0;
    this.window = [];
    this.decide(true);
  }

  /** Tries speculation at once (its drafts look good), unless one was tried lately. */
  trialSoon(): void {
    if (this.mayTrialSoon) this.untilTrial = 1;
  }

  /** Whether trialSoon would bring a trial forward now. */
  get mayTrialSoon(): boolean {
    return this.trial === 0 && this.preferred === "plain" && this.sinceTrial >= FIRST_PROBE;
  }

  /**
   * After a trial: keep the faster regime (speculation only when faster by MARGIN); try the other
   * again later, later still if it lost again. `lost`: a trial ended early, lost whatever it measured.
   */
  private decide(lost = false): void {
    const other: Regime = this.preferred === "plain" ? "speculate" : "plain";
    const [kept, tried] = [this.msPerToken[this.preferred], this.msPerToken[other]];
    this.decided = true;
    this.sinceTrial = 0;
    const wins = !lost && tried !== null && (kept === null || (other === "speculate" ? tried < kept * (1 - MARGIN) : tried <= kept));
    if (wins && other === "speculate" && !this.confirming) {
      // One window is noisy: speculation is tried again shortly, and must win that trial too.
      this.confirming = true;
      this.untilTrial = SETTLE * 4;
      return;
    }
    this.confirming = false;
    if (wins) {
      this.preferred = other;
      this.interval = FIRST_PROBE;
    } else this.interval = Math.min(this.interval * 2, MAX_PROBE_INTERVAL);
    this.untilTrial = this.interval;
  }
}

export class SpeculationPlanner {
  /** Costs of verification runs (the general graph) by batch size and width; of decode steps as width 0. */
  readonly costs = new StepCosts();
  /** Acceptance by the matched ending's length (1, 2, 3, 4 or more), the prior of new choices. */
  private readonly byMatch = Array.from({ length: 5 }, () => new Acceptance(0.98));
  /** The round's work besides the run and the choices' tokens, ms. */
  private readonly overhead = new RecentQuantile(31);
  /** Sampling, detokenising and events per token, ms. */
  private readonly perToken = new RecentQuantile(31);
  private readonly regimes = new Map<number, RegimeChoice>();
  /** The regime of the last round, and how many rounds in a row ran it. */
  private last: { regime: Regime; rounds: number } = { regime: "plain", rounds: 0 };
  private verifying = 0;
  private plainRounds = 0;

  /**
   * "measured": as described above. "always": every round verifies each row's longest draft,
   * whatever it costs (tests of exactness, which need verification to happen).
   */
  constructor(private readonly policy: "measured" | "always" = "measured") {}

  private matchBin(match: number): Acceptance {
    return this.byMatch[Math.min(Math.max(match, 1), 4)]!;
  }

  /** The chance that a draft token of this choice, continuing a match of `match` tokens, is accepted. */
  rate(spec: ChoiceSpeculation, match: number): number {
    return spec.acceptance.rate(this.matchBin(match).rate(0.5, 2), 3);
  }

  private regime(rows: number): RegimeChoice {
    const bin = rowBin(rows);
    let r = this.regimes.get(bin);
    if (!r) {
      r = new RegimeChoice((n) => this.trialMayWin(n));
      // A batch size not seen yet starts as the nearest one that has compared the two regimes
      // (its own trial comes as usual): batches grow and shrink through several bins.
      for (let d = 1; d < ROW_BOUNDS.length + 1; d++) {
        const near = [this.regimes.get(bin - d), this.regimes.get(bin + d)].find((x) => x?.decided);
        if (near) {
          r.preferred = near.preferred;
          break;
        }
      }
      this.regimes.set(bin, r);
    }
    return r;
  }

  /** Whether speculation could win a trial at this batch size: unknown until a trial measured its costs. */
  private trialMayWin(rows: number): boolean {
    return this.costs.estimate(rows, 5) === null || this.predictedGain(rows, this.regime(rows)) >= SKIP_TRIAL_GAIN;
  }

  /** Which regime this batch size runs now, a trial included (for tests and diagnostics). */
  regimeFor(rows: number): Regime {
    return this.regime(rows).current;
  }

  /** Which regime this batch size keeps to between trials (for tests and diagnostics). */
  preferredFor(rows: number): Regime {
    return this.regime(rows).preferred;
  }

  /** Whether a round of `rows` rows verifies drafts (then see plan) or takes a plain decode step. */
  speculating(rows: number): boolean {
    if (this.policy === "always") return true;
    const regime = this.regime(rows);
    if (regime.trialStarted) {
      regime.trialStarted = false;
      // Speculation comes back after a while: what its runs cost then may no longer hold.
      if (regime.current === "speculate") this.costs.forget(rows);
    }
    return regime.current === "speculate";
  }

  /**
   * For a plain round: on how many rows to check what a one-token draft would have done (their
   * acceptance is then known without speculating, see observeShadow); mostly none.
   */
  shadowRows(rows: number): number {
    if (this.policy === "always" || ++this.plainRounds % SHADOW_EVERY !== 0) return 0;
    return Math.min(rows, SHADOW_ROWS);
  }

  /** This speculating round's verification run: its width and each row's draft. */
  plan(rows: PlanRow[]): Plan {
    const n = rows.length;
    let maxWidth = MAX_DRAFT + 1;
    for (const r of rows) maxWidth = Math.min(maxWidth, r.space);
    const drafts: Draft[] = rows.map((r) => r.spec.drafter.propose(Math.min(r.room, maxWidth - 1)));
    let longest = 0;
    for (const d of drafts) longest = Math.max(longest, d.tokens.length);
    maxWidth = Math.max(1, Math.min(maxWidth, longest + 1));
    const rates = rows.map((r, i) => this.rate(r.spec, drafts[i]!.match));
    const tokens = (w: number) => {
      let t = 0;
      for (let i = 0; i < n; i++) t += expectedTokens(rates[i]!, Math.min(drafts[i]!.tokens.length, w - 1));
      return t;
    };
    let width = 1;
    if (this.policy === "always") width = maxWidth;
    else if (this.costs.estimate(n, 1) === null) width = Math.min(maxWidth, FIRST_WIDTH);
    else {
      let best = 0;
      for (let w = 1; w <= maxWidth; w++) {
        const t = tokens(w);
        const ms = this.costs.estimate(n, w)! + this.overhead.value + this.perToken.value * t;
        if (t / ms > best) [best, width] = [t / ms, w];
      }
      if (width === 1 && maxWidth > 1) this.regime(n).giveUpTrial();
      // Keep the costs around the chosen width measured as things change.
      if (maxWidth > 1 && ++this.verifying % NEIGHBOUR_EVERY === 0) {
        width = Math.min(maxWidth, Math.max(1, width + ((this.verifying / NEIGHBOUR_EVERY) % 2 ? 1 : -1)));
      }
    }
    return { width, drafts: drafts.map((d) => d.tokens.slice(0, width - 1)), matches: drafts.map((d) => d.match) };
  }

  /**
   * A round ran: `width` tokens per row (0 for a plain decode step), its run took `runMs` and the
   * choices' work on the `tokens` it produced `tokensMs`.
   */
  observeRound(rows: number, width: number, runMs: number, tokensMs: number, tokens: number): void {
    const kind: Regime = width === 0 ? "plain" : "speculate";
    this.last = kind === this.last.regime ? { regime: kind, rounds: this.last.rounds + 1 } : { regime: kind, rounds: 1 };
    if (this.last.rounds > SETTLE) this.costs.record(rows, width, runMs);
    if (tokens > 0) this.perToken.add(tokensMs / tokens);
  }

  /**
   * The whole cycle of a round that `observeRound` reported, from its start to the next round's
   * (with no prompt read or wait in between): what its regime is measured by.
   */
  observeCycle(rows: number, width: number, ms: number, tokens: number): void {
    const regime = this.regime(rows);
    if (regime.current !== (width === 0 ? "plain" : "speculate") || tokens === 0) return;
    regime.record(ms, tokens, rows);
  }

  /**
   * Plain steps' time per token against what verifying 4-token drafts would take, at the
   * acceptance the plain rounds' one-token drafts showed: the costs as measured (speculation's
   * from its last trial), else a verification run as dear as 1.6 decode steps.
   */
  private predictedGain(rows: number, regime: RegimeChoice): number {
    const plain = this.costs.estimate(rows, 0);
    if (plain === null) return 0;
    const run = this.costs.estimate(rows, 5) ?? plain * 1.6;
    const per = this.overhead.value;
    const tokens = rows * expectedTokens(regime.shadow.rate(0.3, 4), 4);
    const plainMs = (plain + per + this.perToken.value * rows) / rows;
    const specMs = (run + per + this.perToken.value * tokens) / tokens;
    return plainMs / specMs;
  }

  /** A row's draft of `drafted` tokens continuing a match of `match` had `accepted` taken; `rejected` if one was refused. */
  observeDraft(spec: ChoiceSpeculation, match: number, drafted: number, accepted: number, rejected: boolean): void {
    if (drafted === 0) return;
    spec.acceptance.observe(accepted, rejected ? 1 : 0);
    this.matchBin(match).observe(accepted, rejected ? 1 : 0);
  }

  /** In a plain round of `rows` rows, a row's one-token draft (of a match of `match`) was the token it sampled, or not. */
  observeShadow(rows: number, spec: ChoiceSpeculation, match: number, hit: boolean): void {
    this.observeDraft(spec, match, 1, hit ? 1 : 0, !hit);
    const regime = this.regime(rows);
    regime.shadow.observe(hit ? 1 : 0, hit ? 0 : 1);
    // The prediction sorts recent costs: worked out once per plain round that checks drafts (they
    // come SHADOW_ROWS at a time), and only where it could bring a trial forward.
    const due = ++regime.shadowSeen >= 8 && regime.shadowSeen % SHADOW_ROWS === 0 && regime.mayTrialSoon;
    if (due && this.predictedGain(rows, regime) > EARLY_TRIAL_GAIN) regime.trialSoon();
  }

  /** The work of a round outside the run and the tokens: measured between rounds. */
  observeOverhead(ms: number): void {
    this.overhead.add(ms);
  }
}
