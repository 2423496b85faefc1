// importLlama2c: a llama2.c checkpoint + tokenizer -> a complete model directory.

import type { LlamaConfig, GraphVariant, WeightDType } from "../llama/config.ts";
import { type SluiceJson, writeModelDir } from "../modeldir.ts";
import { readLlama2cCheckpoint } from "./checkpoint.ts";
import { LLAMA_SPECIAL_TOKENS_MAP, llama2cToTokenizerJson, llamaTokenizerConfig, readLlama2cTokenizer } from "./tokenizer.ts";

export interface ImportLlama2cOptions {
  id: string;
  outDir: string;
  variant?: GraphVariant;
  dtype?: WeightDType;
  displayName?: string;
  description?: string;
  externalDataThreshold?: number;
  genaiConfig?: boolean;
}

export interface ImportedModel {
  dir: string;
  sluice: SluiceJson;
  config: LlamaConfig;
}

export const LLAMA2C_BOS = 1;
export const LLAMA2C_EOS = 2;

export async function importLlama2c(checkpointPath: string, tokenizerPath: string, opts: ImportLlama2cOptions): Promise<ImportedModel> {
  const { header, weights } = readLlama2cCheckpoint(checkpointPath);
  const vocab = readLlama2cTokenizer(tokenizerPath, header.vocabSize);
  const { tokenizerJson } = llama2cToTokenizerJson(vocab);
  const config: LlamaConfig = {
    modelType: "llama",
    hiddenSize: header.dim,
    intermediateSize: header.hiddenDim,
    numLayers: header.nLayers,
    numHeads: header.nHeads,
    numKvHeads: header.nKvHeads,
    headDim: header.dim / header.nHeads,
    vocabSize: header.vocabSize,
    maxPositionEmbeddings: header.seqLen,
    rmsNormEps: 1e-5,
    ropeTheta: 10000,
    tieWordEmbeddings: header.sharedClassifier,
    qkNorm: false,
    bosTokenId: LLAMA2C_BOS,
    eosTokenId: LLAMA2C_EOS,
  };
  const variant = opts.variant ?? "standard";
  const sluice = writeModelDir(opts.outDir, {
    config,
    weights,
    variant,
    dtype: opts.dtype ?? "float32",
    tokenizerJson,
    tokenizerConfig: llamaTokenizerConfig(header.seqLen),
    specialTokensMap: LLAMA_SPECIAL_TOKENS_MAP,
    // llama2.c ends a story when the model emits BOS; EOS ends it too.
    generationConfig: { bos_token_id: LLAMA2C_BOS, eos_token_id: [LLAMA2C_EOS, LLAMA2C_BOS], do_sample: false, transformers_version: "4.51.0" },
    sluice: {
      id: opts.id,
      display_name: opts.displayName ?? opts.id,
      context_length: header.seqLen,
      capabilities: { tools: false, structured_output: true, images: false },
      description:
        opts.description ??
        `Imported from a llama2.c checkpoint (${header.nLayers} layers, dim ${header.dim}, vocab ${header.vocabSize}). A base model: it continues text and has no chat training.`,
    },
    externalDataThreshold: opts.externalDataThreshold,
    genaiConfig: opts.genaiConfig ?? variant === "fused",
  });
  return { dir: opts.outDir, sluice, config };
}
