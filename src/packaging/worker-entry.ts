// The model worker as the compiled binary starts it: the native manifest first, then the worker.
import "./embedded.ts";
import "../engine/worker/model-worker.ts";
