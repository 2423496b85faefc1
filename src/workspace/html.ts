// A tiny HTML builder: interpolations are escaped unless they are already Html, so a page cannot
// forget to escape a label, an email or a model id.

export class Html {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

export type Part = Html | string | number | boolean | null | undefined | readonly Part[];

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => ESCAPES[c]!);

export const raw = (s: string) => new Html(s);

function render(p: Part): string {
  if (p === null || p === undefined || p === false || p === true) return "";
  if (p instanceof Html) return p.value;
  if (Array.isArray(p)) return (p as readonly Part[]).map(render).join("");
  return escapeHtml(String(p));
}

export function html(strings: TemplateStringsArray, ...values: Part[]): Html {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += render(values[i]!) + strings[i + 1]!;
  return new Html(out);
}

export const join = (parts: readonly Part[]) => new Html(parts.map(render).join(""));
