// A loaded model inside its worker: the decoder session, the tokenizer and chat template, and the
// translation of a chat request into prompt token ids (with the checks that need the tokenizer).
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { chooseProviders, type ProviderChoice } from "../providers.ts";
import { DecoderSession } from "../runtime/decoder.ts";
import { ChatTemplateError, renderChatPrompt } from "../text/chat-template.ts";
import { TextTokenizer } from "../text/tokenizer.ts";
import { EngineRequestError, type EngineModel } from "../types.ts";
import type { WireRequest, WorkerOptions } from "./protocol.ts";

interface ModelCard {
  id?: string;
  display_name?: string;
  context_length?: number;
  capabilities?: { tools?: boolean; structured_output?: boolean; images?: boolean };
}

export class ModelRunner {
  private constructor(
    readonly decoder: DecoderSession,
    readonly tokenizer: TextTokenizer,
    readonly info: EngineModel,
    readonly providers: ProviderChoice,
  ) {}

  static async load(opts: WorkerOptions): Promise<ModelRunner> {
    const providers = chooseProviders(opts.device);
    const decoder = await DecoderSession.create(opts.dir, { providers: providers.providers, threads: opts.threads });
    const tokenizer = TextTokenizer.load(opts.dir);
    const cardPath = join(opts.dir, "sluice.json");
    const card = (existsSync(cardPath) ? JSON.parse(readFileSync(cardPath, "utf8")) : {}) as ModelCard;
    // The card may lower the context (to bound KV memory), never raise it past the graph's.
    const contextLength = Math.min(card.context_length ?? decoder.spec.contextLength, decoder.spec.contextLength);
    if (tokenizer.chatTemplates.default === null && Object.keys(tokenizer.chatTemplates.named).length === 0) {
      throw new Error("the tokenizer has no chat_template (tokenizer_config.json or chat_template.jinja)");
    }
    const info: EngineModel = {
      id: opts.id,
      displayName: card.display_name ?? opts.id,
      contextLength,
      supportsImages: card.capabilities?.images ?? false,
      supportsTools: card.capabilities?.tools ?? false,
      supportsStructuredOutput: card.capabilities?.structured_output ?? false,
      dir: opts.dir,
      provider: decoder.provider,
    };
    return new ModelRunner(decoder, tokenizer, info, providers);
  }

  get vocabSize(): number {
    return this.decoder.spec.vocabSize;
  }

  /** Renders and tokenises the conversation; refuses what this model cannot take. */
  async promptIds(req: WireRequest): Promise<number[]> {
    for (const key of Object.keys(req.sampling.logitBias)) {
      const id = Number(key);
      if (id >= this.vocabSize) {
        throw new EngineRequestError(
          `logit_bias names token ${id}, but this model's vocabulary has ${this.vocabSize} tokens.`,
          "logit_bias",
          "invalid_value",
        );
      }
    }
    let text: string;
    try {
      text = renderChatPrompt(this.tokenizer, req.messages, { tools: req.tools, addGenerationPrompt: true });
    } catch (e) {
      if (e instanceof ChatTemplateError) {
        throw new EngineRequestError(`The model's chat template refused the messages: ${e.message}`, "messages", "invalid_value");
      }
      throw e;
    }
    const ids = await this.tokenizer.encode(text, { addSpecialTokens: false });
    const limit = this.info.contextLength;
    if (ids.length >= limit) {
      throw new EngineRequestError(
        `This model's maximum context length is ${limit} tokens. However, your messages resulted in ${ids.length} tokens, ` +
          `${ids.length - limit + 1} more than fit (at least one token must be left for the completion). Please reduce the length of the messages.`,
        "messages",
        "context_length_exceeded",
      );
    }
    return ids;
  }
}
