import { budgetTick } from "./compile-budget.ts";

/** A piece of output text on the work stack (as opposed to a value still to be written). */
class Text {
  constructor(readonly text: string) {}
}

/**
 * JSON text with object keys sorted, so equal schemas give equal cache keys. Iterative: schemas
 * come from clients, and a recursive walk of one nested 10,000 levels deep overflows the stack.
 * With `maxLength`, gives up (returns null) as soon as the text would be longer.
 */
export function canonicalJsonWithin(value: unknown, maxLength: number): string | null {
  const out: string[] = [];
  let length = 0;
  const work: unknown[] = [value];
  const emit = (s: string): boolean => {
    length += s.length;
    out.push(s);
    return length <= maxLength;
  };
  while (work.length > 0) {
    // Schemas are canonicalised per subschema while compiling: their time counts.
    budgetTick();
    const item = work.pop();
    if (item instanceof Text) {
      if (!emit(item.text)) return null;
      continue;
    }
    if (item === null || typeof item !== "object") {
      if (!emit(JSON.stringify(item) ?? "null")) return null;
      continue;
    }
    if (Array.isArray(item)) {
      if (!emit("[")) return null;
      work.push(new Text("]"));
      for (let i = item.length - 1; i >= 0; i--) {
        work.push(item[i]);
        if (i > 0) work.push(new Text(","));
      }
      continue;
    }
    const record = item as Record<string, unknown>;
    const keys = Object.keys(record)
      .sort()
      .filter((k) => record[k] !== undefined);
    if (!emit("{")) return null;
    work.push(new Text("}"));
    for (let i = keys.length - 1; i >= 0; i--) {
      const k = keys[i]!;
      work.push(record[k]);
      work.push(new Text(`${i > 0 ? "," : ""}${JSON.stringify(k)}:`));
    }
  }
  return out.join("");
}

/** JSON text with object keys sorted, so equal schemas give equal cache keys. */
export function canonicalJson(value: unknown): string {
  return canonicalJsonWithin(value, Infinity)!;
}
