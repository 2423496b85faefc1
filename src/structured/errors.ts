/**
 * A schema keyword that would constrain the output but that the grammar compiler cannot enforce.
 * Raised instead of silently ignoring the keyword: a constraint the model is not held to would
 * yield outputs that fail the caller's own validation. The api room maps it to a 400.
 */
export class UnsupportedSchemaError extends Error {
  constructor(
    readonly keyword: string,
    /** JSON pointer (RFC 6901) of the schema object carrying the keyword. */
    readonly pointer: string,
    detail?: string,
  ) {
    super(`unsupported JSON Schema keyword "${keyword}" at "${pointer || "/"}"${detail ? `: ${detail}` : ""}`);
    this.name = "UnsupportedSchemaError";
  }
}

export function pointerAppend(pointer: string, token: string | number): string {
  return `${pointer}/${String(token).replace(/~/g, "~0").replace(/\//g, "~1")}`;
}
