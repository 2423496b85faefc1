import type { ResponseFormat } from "../protocol/chat.ts";
import { compileJsonSchema, jsonObjectGrammar } from "./compile.ts";
import type { Grammar } from "./grammar.ts";
import type { SchemaCompileOptions } from "./schema.ts";

/**
 * The grammar a response_format asks for; null for plain text (no constraint). A json_schema
 * without a schema means any JSON object. Throws UnsupportedSchemaError for schemas it cannot
 * enforce.
 */
export function responseFormatGrammar(format: ResponseFormat | undefined, options: Partial<SchemaCompileOptions> = {}): Grammar | null {
  if (!format || format.type === "text") return null;
  if (format.type === "json_object") return jsonObjectGrammar(options);
  const schema = format.json_schema.schema;
  return schema === undefined ? jsonObjectGrammar(options) : compileJsonSchema(schema, options);
}
