// The model kit: builds real-layout ONNX model directories (importers, synthetic models, demo).

export { buildSyntheticModel, syntheticPresetNames } from "./synthetic.ts";
export type { SyntheticPreset, SyntheticSpec, SyntheticShape, SyntheticModelInfo } from "./synthetic.ts";
export type { SluiceJson, SluiceCapabilities, SluiceGraphInfo } from "./modeldir.ts";
export type { GraphVariant, WeightDType, LlamaConfig, ModelType } from "./llama/config.ts";
export type { LlamaWeights, LlamaLayerWeights } from "./llama/weights.ts";
export { buildDecoderModel, pastKeyName, presentName } from "./llama/graph.ts";
export { GraphBuilder, serializeModel } from "./onnx/builder.ts";
export { importLlama2c } from "./llama2c/import.ts";
export type { ImportLlama2cOptions, ImportedModel } from "./llama2c/import.ts";
export { buildDemoModel, buildDemoModelInfo, demoModelDir, DEMO_MODEL_ID } from "./demo.ts";
export { gqaHeadDim } from "./llama/graph.ts";
export { float32ToHalf, halfToFloat32, toHalfBits, fromHalfBits } from "./onnx/dtype.ts";
export { buildSyntheticVlm, VLM_CHAT_TEMPLATE, IMAGE_TOKEN, FAKE_IMAGE_TOKEN, GLOBAL_IMAGE_TOKEN } from "./vlm/synthetic.ts";
export type { SyntheticVlmSpec, SyntheticVlmInfo } from "./vlm/synthetic.ts";
export { buildVisionEncoder, buildEmbedTokens } from "./vlm/graphs.ts";
export type { VisionEncoderShape, VisionEncoderWeights } from "./vlm/graphs.ts";
export { buildSyntheticQwen2VL, qwen2vlPreprocessorConfig, QWEN2VL_CHAT_TEMPLATE } from "./vlm/qwen2vl.ts";
export type { SyntheticQwen2VLSpec, SyntheticQwen2VLInfo } from "./vlm/qwen2vl.ts";
export { importHfCheckpoint, HF_IMPORT_DTYPES } from "./hf/import.ts";
export type { ImportHfOptions, ImportedHfModel, HfImportDType } from "./hf/import.ts";
export { writeHfCheckpoint } from "./hf/export.ts";
export type { HfCheckpointSpec } from "./hf/export.ts";
export { SUPPORTED_ARCHITECTURES } from "./hf/config.ts";
export { importGguf, GGUF_IMPORT_DTYPES } from "./gguf/import.ts";
export type { ImportGgufOptions, ImportedGgufModel, GgufImportDType } from "./gguf/import.ts";
