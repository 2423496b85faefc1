// A ChatML chat template (the Qwen2.5 layout, tools included) for the synthetic byte-level
// models, and the tokenizer_config.json / special_tokens_map.json that go with it.

import type { AddedToken } from "./bytelevel.ts";

export const CHATML_TEMPLATE = `{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0]['role'] == 'system' %}
{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message['role'] == 'system' %}
{%- if not loop.first %}{{- '<|im_start|>system\\n' + message['content'] + '<|im_end|>\\n' }}{%- endif %}
{%- elif message['role'] == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message['content'] %}{{- '\\n' + message['content'] }}{%- endif %}
{%- if message['tool_calls'] %}
{%- for tool_call in message['tool_calls'] %}
{%- set call = tool_call['function'] if tool_call['function'] else tool_call %}
{{- '\\n<tool_call>\\n{"name": "' + call['name'] + '", "arguments": ' }}
{%- if call['arguments'] is string %}{{- call['arguments'] }}{%- else %}{{- call['arguments'] | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\\n' }}
{%- elif message['role'] == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- else %}
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}`;

export const CHATML_SPECIALS = [
  { content: "<|endoftext|>", special: true },
  { content: "<|im_start|>", special: true },
  { content: "<|im_end|>", special: true },
  { content: "<tool_call>", special: false },
  { content: "</tool_call>", special: false },
];

export function chatmlTokenizerConfig(added: AddedToken[], modelMaxLength: number): Record<string, unknown> {
  return {
    add_bos_token: false,
    add_eos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: Object.fromEntries(
      added.map((t) => [String(t.id), { content: t.content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: t.special }]),
    ),
    additional_special_tokens: ["<|im_start|>", "<|im_end|>"],
    bos_token: null,
    chat_template: CHATML_TEMPLATE,
    clean_up_tokenization_spaces: false,
    eos_token: "<|im_end|>",
    errors: "replace",
    model_max_length: modelMaxLength,
    pad_token: "<|endoftext|>",
    split_special_tokens: false,
    tokenizer_class: "Qwen2Tokenizer",
    unk_token: null,
  };
}

export const CHATML_SPECIAL_TOKENS_MAP = {
  additional_special_tokens: ["<|im_start|>", "<|im_end|>"],
  eos_token: { content: "<|im_end|>", lstrip: false, normalized: false, rstrip: false, single_word: false },
  pad_token: { content: "<|endoftext|>", lstrip: false, normalized: false, rstrip: false, single_word: false },
};
