// The engine's threads as the compiled binary starts them: the native manifest first, then the
// model worker, or a model's schema compile thread when started with --sluice-compile-thread.
import "./embedded.ts";

if (process.argv.includes("--sluice-compile-thread")) await import("../engine/worker/compile-worker.ts");
else await import("../engine/worker/model-worker.ts");
