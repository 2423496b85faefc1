// Loaded before every test file (bunfig.toml): the test process runs models in process too, and
// keeps ONNX Runtime's telemetry off as `sluice` itself does (src/engine/runtime/ort-telemetry.ts).
import { keepOrtTelemetryOff } from "../src/engine/runtime/ort-telemetry.ts";

keepOrtTelemetryOff();
