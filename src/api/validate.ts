// Turns a TypeBox schema mismatch into one precise OpenAI-style error: the deepest offending
// parameter (as `messages[0].content[1].type`) and what was expected there. TypeBox's own error
// list stops at a union ("Expected union value"), so unions are resolved here by their literal
// discriminators (`type`, `role`) before descending.
import type { TSchema } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";

export interface ValidationProblem {
  param: string;
  message: string;
}

type Json = unknown;
type SchemaNode = TSchema & {
  anyOf?: SchemaNode[];
  properties?: Record<string, SchemaNode>;
  required?: string[];
  additionalProperties?: boolean | SchemaNode;
  patternProperties?: Record<string, SchemaNode>;
  items?: SchemaNode;
  type?: string;
  const?: unknown;
  minItems?: number;
  maxItems?: number;
  maxProperties?: number;
};

const isObject = (v: Json): v is Record<string, Json> => typeof v === "object" && v !== null && !Array.isArray(v);

const join = (path: string, key: string | number) =>
  typeof key === "number" ? `${path}[${key}]` : path ? `${path}.${key}` : key;

function literals(s: SchemaNode): unknown[] | null {
  if ("const" in s) return [s.const];
  if (s.anyOf && s.anyOf.every((b) => "const" in b)) return s.anyOf.map((b) => b.const);
  return null;
}

function typeName(v: Json): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  return typeof v;
}

function describe(s: SchemaNode): string {
  if ("const" in s) return JSON.stringify(s.const);
  if (s.anyOf) return s.anyOf.map(describe).join(" or ");
  if (s.type === "integer") return "an integer";
  if (s.type === "array") return "an array";
  if (s.type === "object") return "an object";
  return s.type ? `a ${s.type}` : "a valid value";
}

/** When no object branch's discriminator matches, the problem is the discriminator itself. */
function discriminatorProblem(branches: SchemaNode[], value: Record<string, Json>, path: string): ValidationProblem | null {
  const first = branches.find((b) => b.type === "object");
  const disc = Object.entries(first?.properties ?? {}).find(([, p]) => literals(p) !== null)?.[0];
  if (!disc) return null;
  const allowed = branches.flatMap((b) => literals(b.properties?.[disc] ?? ({} as SchemaNode)) ?? []);
  const param = join(path, disc);
  if (!(disc in value)) return { param, message: `Missing required parameter: '${param}'.` };
  return {
    param,
    message: `Invalid value for '${param}': ${JSON.stringify(value[disc])} is not one of ${allowed.map((a) => JSON.stringify(a)).join(", ")}.`,
  };
}

function chooseBranch(branches: SchemaNode[], value: Json): SchemaNode | null {
  const byKind = branches.filter((b) => {
    if ("const" in b) return b.const === value;
    if (b.type === "object") return isObject(value);
    if (b.type === "array") return Array.isArray(value);
    if (b.type === "integer") return typeof value === "number";
    if (b.type === "null") return value === null;
    return b.type === typeof value;
  });
  if (byKind.length <= 1) return byKind[0] ?? null;
  // Several object branches: the one whose literal-valued properties all match.
  if (isObject(value)) {
    for (const b of byKind) {
      const props = b.properties ?? {};
      const discriminators = Object.entries(props).filter(([, p]) => literals(p) !== null);
      if (
        discriminators.length > 0 &&
        discriminators.every(([k, p]) => k in value && literals(p)!.includes(value[k]))
      ) {
        return b;
      }
    }
    return null;
  }
  return byKind[0]!;
}

export function findProblem(schema: TSchema, value: Json, path = ""): ValidationProblem | null {
  const s = schema as SchemaNode;
  if (Value.Check(s, value)) return null;
  const where = path || "body";
  if (s.anyOf) {
    const branch = chooseBranch(s.anyOf, value);
    if (!branch) {
      const objectBranches = s.anyOf.filter((b) => b.type === "object");
      if (isObject(value) && objectBranches.length > 1) {
        const p = discriminatorProblem(objectBranches, value, path);
        if (p) return p;
      }
      const consts = s.anyOf.filter((b) => "const" in b).map((b) => b.const);
      if (consts.some((c) => typeof c === typeof value)) {
        return {
          param: where,
          message: `Invalid value for '${where}': ${JSON.stringify(value)} is not one of ${describe(s)}.`,
        };
      }
      return { param: where, message: `Invalid type for '${where}': expected ${describe(s)}, but got ${typeName(value)}.` };
    }
    return findProblem(branch, value, path) ?? { param: where, message: `Invalid value for '${where}'.` };
  }
  if (s.type === "object" && isObject(value)) {
    const props = s.properties ?? {};
    for (const key of Object.keys(value)) {
      if (!(key in props) && s.additionalProperties === false && !s.patternProperties) {
        return { param: join(path, key), message: `Unrecognized request argument supplied: ${join(path, key)}` };
      }
    }
    for (const key of s.required ?? []) {
      if (!(key in value)) {
        return { param: join(path, key), message: `Missing required parameter: '${join(path, key)}'.` };
      }
    }
    if (s.maxProperties !== undefined && Object.keys(value).length > s.maxProperties) {
      return { param: where, message: `'${where}' has more than ${s.maxProperties} entries.` };
    }
    for (const [key, sub] of Object.entries(props)) {
      if (key in value && value[key] !== undefined) {
        const p = findProblem(sub, value[key], join(path, key));
        if (p) return p;
      }
    }
    for (const sub of Object.values(s.patternProperties ?? {})) {
      for (const [key, v] of Object.entries(value)) {
        const p = findProblem(sub, v, join(path, key));
        if (p) return p;
      }
    }
  }
  if (s.type === "array" && Array.isArray(value)) {
    const items = value as unknown[];
    if (s.minItems !== undefined && items.length < s.minItems) {
      return {
        param: where,
        message: s.minItems === 1 ? `'${where}' must not be empty.` : `'${where}' needs at least ${s.minItems} items.`,
      };
    }
    if (s.maxItems !== undefined && items.length > s.maxItems) {
      return { param: where, message: `'${where}' has more than ${s.maxItems} items.` };
    }
    for (let i = 0; i < items.length; i++) {
      const p = findProblem(s.items!, items[i], join(path, i));
      if (p) return p;
    }
  }
  const first = Value.Errors(s, value).First();
  if (!first) return { param: where, message: `Invalid value for '${where}'.` };
  const expectedType =
    s.type && typeName(value) !== s.type && !(s.type === "integer" && typeof value === "number");
  return {
    param: where,
    message: expectedType
      ? `Invalid type for '${where}': expected ${describe(s)}, but got ${typeName(value)}.`
      : `Invalid value for '${where}': ${first.message.charAt(0).toLowerCase()}${first.message.slice(1)}.`,
  };
}
