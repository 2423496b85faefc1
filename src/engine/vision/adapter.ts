// What differs between vision-language families: how an image becomes the vision encoder's
// inputs and the text that stands for it in the prompt.
import type * as ort from "onnxruntime-node";
import type { RawImage } from "../../vision/decode.ts";

export type ImageDetail = "low" | "high" | "auto";

export interface PreparedImage {
  feeds: Record<string, ort.Tensor>;
  /** What replaces the image's placeholder in the rendered prompt. */
  promptText: string;
  /** Feature rows the encoder must give for it (its image tokens). */
  rows: number;
  /** image_grid_thw in patches, for families with 3-D positions; null otherwise. */
  grid: [number, number, number] | null;
}

export interface ImageAdapter {
  /** What the chat template writes for each image. */
  readonly placeholder: string;
  /** Spatial merge size of a 3-D position (multimodal rotary) family; null for 1-D positions. */
  readonly mergeSize: number | null;
  prepare(image: RawImage, detail: ImageDetail | undefined, pixelType: "float32" | "float16"): Promise<PreparedImage>;
}
