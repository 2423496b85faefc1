// Where a pull of a GGUF file meets the GGUF importer (`sluice models import gguf`, src/modelkit/
// gguf/): the pull downloads the file (every part of a split one), this converts it into the model
// directory that is then placed.
import { importGguf } from "../gguf/import.ts";

/** Converts a downloaded GGUF file (the first part of a split one) into a model directory. */
export type GgufImporter = (file: string, opts: { id: string; outDir: string; dtype: "fp32" | "fp16" | "q4" | "q4f16" | "auto"; device: "cpu" | "cuda" }) => Promise<unknown>;

export const ggufImporter: GgufImporter = (file, o) => importGguf({ file, out: o.outDir, id: o.id, dtype: o.dtype, device: o.device });
