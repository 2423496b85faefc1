// The engine room's entry: build the engine the server uses.
import type { Logger } from "../log.ts";
import { WorkerEngine } from "./host.ts";
import { chooseProviders, type Device } from "./providers.ts";
import type { Engine } from "./types.ts";

export interface CreateEngineOptions {
  log: Logger;
  device: Device;
  threads: number;
}

export async function createEngine(opts: CreateEngineOptions): Promise<Engine> {
  // Decided once here so the reason is logged once, and `--device cuda` refuses to start early.
  const choice = chooseProviders(opts.device);
  if (choice.cudaUnavailable && opts.device === "auto") {
    opts.log.warn("CUDA execution provider unavailable, using CPU", { reason: choice.cudaUnavailable });
  } else {
    opts.log.info("execution providers", { providers: choice.providers });
  }
  return new WorkerEngine({ log: opts.log, device: opts.device, threads: opts.threads });
}
