// serve's request-limit flags (each also read from SLUICE_<OPTION>) and their parsing.
import { DEFAULT_REQUEST_LIMITS, type RequestLimits } from "../api/limits/request-limits.ts";
import { UsageError, type CommandArgs, type OptionSpec } from "./framework.ts";

const D = DEFAULT_REQUEST_LIMITS;

export const LIMIT_OPTIONS: OptionSpec[] = [
  { name: "max-body-bytes", type: "string", help: "Largest request body; larger ones get 413 request_too_large", default: String(D.maxBodyBytes) },
  { name: "body-timeout-seconds", type: "string", help: "A request body must arrive within this long; a slower one (a client that sends less than its Content-Length) gets 408 request_timeout and its connection is closed (0: no bound)", default: String(D.bodyTimeoutMs / 1000) },
  { name: "max-messages", type: "string", help: "Most messages in one chat request; more get 400 too_many_messages (0: no limit)", default: String(D.maxMessages) },
  { name: "max-tokens-cap", type: "string", help: "Largest max_tokens a request may ask for (400 max_tokens_too_large above) and the bound when it asks for none (0: the model's context)", default: String(D.maxTokensCap) },
  { name: "max-generation-seconds", type: "string", help: "Wall time of one generation; a longer one is ended with finish_reason \"length\" and recorded as time_limit (0: no limit)", default: String(D.maxGenerationMs / 1000) },
  { name: "stream-idle-seconds", type: "string", help: "A stream whose client reads nothing for this long is cut off and its generation freed (0: never)", default: String(D.streamIdleMs / 1000) },
  { name: "max-stop-chars", type: "string", help: "Longest stop string; longer ones get 400 (0: no limit)", default: String(D.maxStopChars) },
  { name: "max-logit-bias", type: "string", help: "Most logit_bias entries in one request; more get 400 (0: no limit)", default: String(D.maxLogitBias) },
];

function number(args: CommandArgs, name: string, integer: boolean): number {
  const v = Number(args.values[name]);
  if (!Number.isFinite(v) || v < 0 || (integer && !Number.isInteger(v))) {
    throw new UsageError(`--${name} must be ${integer ? "an integer" : "a number"} ≥ 0`);
  }
  return v;
}

export function parseLimitOptions(args: CommandArgs): RequestLimits {
  const body = number(args, "max-body-bytes", true);
  if (body < 1024) throw new UsageError("--max-body-bytes must be at least 1024");
  return {
    maxBodyBytes: body,
    bodyTimeoutMs: Math.round(number(args, "body-timeout-seconds", false) * 1000),
    maxMessages: number(args, "max-messages", true),
    maxTokensCap: number(args, "max-tokens-cap", true),
    maxGenerationMs: Math.round(number(args, "max-generation-seconds", false) * 1000),
    streamIdleMs: Math.round(number(args, "stream-idle-seconds", false) * 1000),
    maxStopChars: number(args, "max-stop-chars", true),
    maxLogitBias: number(args, "max-logit-bias", true),
  };
}
