// The two strict tools the end-to-end tool tests call (test/engine/e2e/tool-*.test.ts), with
// validators for their arguments.
import Ajv from "ajv";

export const weather = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 }, unit: { enum: ["C", "F"] } }, required: ["city", "unit"], additionalProperties: false },
    strict: true,
  },
};

export const time = {
  type: "function" as const,
  function: { name: "get_time", parameters: { type: "object", properties: { tz: { type: "string", maxLength: 8 } }, required: ["tz"], additionalProperties: false }, strict: true },
};

const ajv = new Ajv({ strict: false });
export const validate: Record<string, (v: unknown) => boolean> = { get_weather: ajv.compile(weather.function.parameters), get_time: ajv.compile(time.function.parameters) };
