// The one place where a pull of a safetensors-only repository meets the Hugging Face importer
// (`sluice models import hf`, src/modelkit/hf/). Until that importer is part of the build this is
// null and such a pull stops with a message naming the command; wiring it is this one line.

/** Converts a downloaded checkpoint folder (config, tokenizer, *.safetensors) into a model directory. */
export type SafetensorsImporter = (sourceDir: string, opts: { id: string; outDir: string; dtype: "fp32" | "fp16" | "q4" | "q4f16" }) => Promise<unknown>;

export const safetensorsImporter: SafetensorsImporter | null = null;
