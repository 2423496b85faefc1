import { describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { TextTokenizer, TokenizerLoadError } from "../../../src/engine/text/tokenizer.ts";
import { QWEN3_DIR, llama2StyleTokenizerJson, qwen3Dir, tempDir, writeTokenizerDir } from "./fixtures.ts";

describe("TextTokenizer on the Qwen3 fixture", () => {
  const tok = TextTokenizer.load(QWEN3_DIR);

  test("special tokens and ids come from tokenizer_config", () => {
    expect(tok.eosToken).toBe("<|im_end|>");
    expect(tok.eosTokenId).toBe(151645);
    expect(tok.eosTokenIds).toEqual([151645]);
    expect(tok.padToken).toBe("<|endoftext|>");
    expect(tok.padTokenId).toBe(151643);
    expect(tok.bosToken).toBeNull();
    expect(tok.templateTokens).toEqual({ eos_token: "<|im_end|>", pad_token: "<|endoftext|>" });
    expect(tok.vocabSize).toBe(151669);
    expect(tok.isSpecial(151644)).toBe(true);
    expect(tok.isSpecial(tok.tokenToId("<think>")!)).toBe(false);
    expect(tok.addedTokens.find((t) => t.content === "<|im_start|>")).toEqual({
      id: 151644,
      content: "<|im_start|>",
      special: true,
    });
    expect(tok.chatTemplates.default).toContain("<|im_start|>");
  });

  test("encode / decode / idToToken", async () => {
    const ids = await tok.encode("<|im_start|>user\nHello 你好");
    expect(ids[0]).toBe(151644);
    expect(tok.idToToken(ids[1]!)).toBe("user");
    expect(await tok.decode(ids)).toBe("<|im_start|>user\nHello 你好");
    expect(await tok.decode(ids, { skipSpecialTokens: true })).toBe("user\nHello 你好");
    expect(tok.idToToken(151_900)).toBeNull();
  });

  test("tokenBytes gives the bytes a single token stands for", async () => {
    const [id] = await tok.encode(" hello");
    expect(Array.from(tok.tokenBytes(id!)!)).toEqual(Array.from(new TextEncoder().encode(" hello")));
    const emoji = await tok.encode(" 🎉");
    const all = emoji.flatMap((i) => Array.from(tok.tokenBytes(i)!));
    expect(all).toEqual(Array.from(new TextEncoder().encode(" 🎉")));
  });
});

describe("TextTokenizer config files", () => {
  test("EOS ids gather generation_config lists and config.json", () => {
    const dir = qwen3Dir({
      "generation_config.json": { eos_token_id: [151645, 151643], bos_token_id: 151643 },
      "config.json": { eos_token_id: 151643, vocab_size: 151936 },
    });
    const tok = TextTokenizer.load(dir);
    expect([...tok.eosTokenIds].sort()).toEqual([151643, 151645]);
    expect(tok.isEos(151643)).toBe(true);
    expect(tok.bosToken).toBe("<|endoftext|>");
  });

  test("a list of named chat templates exposes default and tool_use", () => {
    const cfg = JSON.parse(readFileSync(join(QWEN3_DIR, "tokenizer_config.json"), "utf8"));
    cfg.chat_template = [
      { name: "default", template: "D{{ messages[0].content }}" },
      { name: "tool_use", template: "T{{ tools | length }}" },
      { name: "rag", template: "R" },
    ];
    const tok = TextTokenizer.load(qwen3Dir({ "tokenizer_config.json": cfg }));
    expect(tok.chatTemplates.default).toBe("D{{ messages[0].content }}");
    expect(tok.chatTemplates.toolUse).toBe("T{{ tools | length }}");
    expect(tok.chatTemplates.named.rag).toBe("R");
  });

  test("chat_template.jinja and special_tokens_map.json are read", () => {
    const dir = writeTokenizerDir(llama2StyleTokenizerJson(), {
      "special_tokens_map.json": {
        bos_token: { content: "<s>", lstrip: false, normalized: false, rstrip: false, single_word: false },
        eos_token: "</s>",
        unk_token: "<unk>",
      },
    });
    writeFileSync(join(dir, "chat_template.jinja"), "{{ bos_token }}x");
    const tok = TextTokenizer.load(dir);
    expect(tok.bosToken).toBe("<s>");
    expect(tok.bosTokenId).toBe(1);
    expect(tok.eosTokenIds).toEqual([2]);
    expect(tok.unkToken).toBe("<unk>");
    expect(tok.chatTemplates.default).toBe("{{ bos_token }}x");
  });

  test("addSpecialTokens runs the post-processor", async () => {
    const tok = TextTokenizer.load(writeTokenizerDir(llama2StyleTokenizerJson()));
    expect((await tok.encode("the", { addSpecialTokens: true }))[0]).toBe(1);
    expect((await tok.encode("the"))[0]).not.toBe(1);
  });

  test("a directory without tokenizer.json is a typed error", () => {
    expect(() => TextTokenizer.load(tempDir("sluice-empty-"))).toThrow(TokenizerLoadError);
  });
});
