// Loaded before every test file (bunfig.toml): the test process runs models in process too, and
// keeps ONNX Runtime's telemetry off as `sluice` itself does (src/engine/runtime/ort-telemetry.ts).
// Temporary directories that fixtures made without a handle to remove them by (helpers/cleanup.ts)
// go once every test file has run: a hook registered here belongs to the whole run.
import { afterAll } from "bun:test";
import { keepOrtTelemetryOff } from "../src/engine/runtime/ort-telemetry.ts";
import { removeAll } from "./helpers/cleanup.ts";

keepOrtTelemetryOff();
afterAll(removeAll);
