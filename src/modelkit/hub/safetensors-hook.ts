// The one place where a pull of a safetensors-only repository meets the Hugging Face importer
// (`sluice models import hf`, src/modelkit/hf/): the pull downloads the checkpoint, this converts
// it into the model directory that is then placed. Set to null, such a pull stops with a message
// naming the import command instead.
import { importHfCheckpoint } from "../hf/import.ts";

/** Converts a downloaded checkpoint folder (config, tokenizer, *.safetensors) into a model directory. */
export type SafetensorsImporter = (sourceDir: string, opts: { id: string; outDir: string; dtype: "fp32" | "fp16" | "q4" | "q4f16" }) => Promise<unknown>;

export const safetensorsImporter: SafetensorsImporter | null = (sourceDir, o) => importHfCheckpoint({ dir: sourceDir, out: o.outDir, id: o.id, dtype: o.dtype });
