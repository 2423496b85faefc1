// A request as the scheduler (scheduler.ts) carries it through its rounds: the job, its choices
// and their rows in a batch, and the small steps every round takes of them (one token of a choice,
// the prefix-cache keys of a resumed or finished sequence).
import type { PrefixKv, Sequence } from "../batching/kv.ts";
import { NoAllowedTokenError } from "../sampling/index.ts";
import { EngineRequestError, type GenerationEvent } from "../types.ts";
import type { PromptImages } from "../vision/vision-model.ts";
import type { ChoiceSpeculation } from "../speculation/planner.ts";
import type { ChoiceStream } from "./choice.ts";
import type { Waiting } from "./fair-queue.ts";
import type { WireRequest } from "./protocol.ts";
import type { RequestClock } from "./request-clock.ts";

export interface ChoiceRun {
  stream: ChoiceStream;
  seq: Sequence | null;
  /** The token to feed next, once sampled. */
  next: number | null;
  /** Its text for draft lookups and how its drafts fared; made at its first decode round. */
  spec?: ChoiceSpeculation;
}

/** A decoding choice of a request, as a row of a round's batch. */
export interface Row {
  job: Job;
  choice: ChoiceRun;
}

export interface Job extends Waiting {
  rid: number;
  request: WireRequest;
  prompt: number[];
  /** Image features of the prompt. */
  images: PromptImages | null;
  /** The prompt as the prefix cache matches it (image positions stand for their content). */
  key: number[];
  maxNew: number;
  state: "queued" | "prefill" | "decode";
  choices: ChoiceRun[];
  cancelled: boolean;
  out: GenerationEvent[];
  /** Admitted at least once (its prompt event went out). */
  startedOnce: boolean;
  /** Preempted while decoding: per choice, the tokens its cache held, to recompute on resuming. */
  replay: (number[] | null)[] | null;
  /** Tokens charged to its key so far (see chargeService). */
  charged: number;
  /** When it was last admitted (a counter): the latest admitted is preempted first. */
  admittedAt: number;
  /** Its timing points (queue, prefill, tokens). */
  clock: RequestClock;
}

/** One token of a choice; a state where nothing is allowed becomes the request's error, naming the choice. */
export function advanceChoice(stream: ChoiceStream, logits: Float32Array, out: GenerationEvent[]): number | null {
  try {
    return stream.advance(logits, out);
  } catch (e) {
    if (e instanceof NoAllowedTokenError) {
      throw new EngineRequestError(
        `No token is allowed next in choice ${stream.index}: ${stream.constrained ? "logit_bias bans every token the response format or tool-call grammar allows at this point" : "logit_bias bans every token the model can produce"}.`,
        "logit_bias",
        "no_allowed_token",
      );
    }
    throw e;
  }
}

/** The prefix-cache key of a resumed sequence's tokens: its prompt by its key, then generated ids. */
export function replayKey(job: Job, tokens: number[]): number[] {
  return [...job.key, ...tokens.slice(job.key.length)];
}

/** A snapshot filed under the prefix key of its positions rather than their token ids, for the account it serves. */
export function keyed(kv: PrefixKv, key: number[], owner: string): PrefixKv {
  return { ...kv, tokens: key.slice(0, kv.tokens.length), owner };
}
