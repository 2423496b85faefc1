// Ready-to-paste configuration for clients that speak the OpenAI API, generated from the same
// facts as GET /v1/integrations: the base URL, the key's environment variable, the model ids.

export interface IntegrationInfo {
  /** e.g. http://127.0.0.1:8080/v1 */
  baseUrl: string;
  apiKeyEnv: string;
  models: string[];
}

export interface Snippet {
  id: string;
  title: string;
  /** Where the text goes. */
  where: string;
  language: string;
  text: string;
}

/** The integrations payload, in the shape GET /v1/integrations answers. */
export function integrationInfo(apiBase: string, models: string[]): IntegrationInfo {
  return { baseUrl: `${apiBase.replace(/\/+$/, "")}/v1`, apiKeyEnv: "OPENAI_API_KEY", models };
}

export function snippets(info: IntegrationInfo, model: string): Snippet[] {
  const { baseUrl: base, apiKeyEnv: env } = info;
  const js = JSON.stringify;
  return [
    {
      id: "curl",
      title: "curl",
      where: "A terminal, with the key in the environment.",
      language: "sh",
      text: `export ${env}="sk-sluice-…"
curl ${base}/chat/completions \\
  -H "Authorization: Bearer $${env}" \\
  -H "Content-Type: application/json" \\
  -d '${JSON.stringify({ model, messages: [{ role: "user", content: "Hello!" }] })}'`,
    },
    {
      id: "node",
      title: "Node.js (openai)",
      where: "npm install openai, then save as index.js and run node index.js:",
      language: "js",
      // No top-level import or await: the file runs as it is in a CommonJS project (what
      // npm init makes) and in an ES module one alike.
      text: `async function main() {
  const { default: OpenAI } = await import("openai");
  const client = new OpenAI({ baseURL: ${js(base)}, apiKey: process.env.${env} });
  const completion = await client.chat.completions.create({
    model: ${js(model)},
    messages: [{ role: "user", content: "Hello!" }],
  });
  console.log(completion.choices[0].message.content);
}

main();`,
    },
    {
      id: "python",
      title: "Python (openai)",
      where: "pip install openai, then:",
      language: "python",
      text: `import os
from openai import OpenAI

client = OpenAI(base_url=${js(base)}, api_key=os.environ[${js(env)}])
completion = client.chat.completions.create(
    model=${js(model)},
    messages=[{"role": "user", "content": "Hello!"}],
)
print(completion.choices[0].message.content)`,
    },
    {
      id: "continue",
      title: "Continue",
      where: "~/.continue/config.yaml, under models:",
      language: "yaml",
      text: `models:
  - name: Sluice ${model}
    provider: openai
    model: ${model}
    apiBase: ${base}
    apiKey: sk-sluice-…
    roles: [chat, edit, apply]`,
    },
    {
      id: "cline",
      title: "Cline",
      where: "Cline settings → API Provider: “OpenAI Compatible”.",
      language: "text",
      text: `Base URL:  ${base}
API Key:   sk-sluice-…
Model ID:  ${model}`,
    },
    {
      id: "aider",
      title: "aider",
      where: "A terminal in your repository.",
      language: "sh",
      text: `export OPENAI_API_BASE=${base}
export OPENAI_API_KEY="sk-sluice-…"
aider --model openai/${model}`,
    },
    {
      id: "opencode",
      title: "opencode",
      where: "opencode.json in your project (or ~/.config/opencode/opencode.json).",
      language: "json",
      text: JSON.stringify(
        {
          $schema: "https://opencode.ai/config.json",
          provider: {
            sluice: {
              npm: "@ai-sdk/openai-compatible",
              name: "Sluice",
              options: { baseURL: base, apiKey: `{env:${env}}` },
              models: Object.fromEntries(info.models.map((m) => [m, { name: m }])),
            },
          },
          model: `sluice/${model}`,
        },
        null,
        2,
      ),
    },
  ];
}
