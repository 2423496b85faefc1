// The variables a chat template reads from its context: the names it uses that it does not bind
// itself (loop variables, `set` targets, macro names and parameters) and that are not Jinja's
// globals. Read from the template's syntax tree as @huggingface/jinja parses it, so that
// chat_template_kwargs can be checked against what the template will actually look at.
import { Template } from "@huggingface/jinja";

/** Names every @huggingface/jinja environment defines (setupGlobals) and the loop object. */
const GLOBALS = new Set(["true", "false", "none", "True", "False", "None", "raise_exception", "range", "strftime_now", "namespace", "loop", "caller", "varargs", "kwargs"]);

interface Node {
  type: string;
  [field: string]: unknown;
}

const isNode = (v: unknown): v is Node => v !== null && typeof v === "object" && typeof (v as Node).type === "string";

/** Free variables of a parsed template (see the file comment); approximate where a name is both bound and read. */
export function templateVariables(source: string): Set<string> {
  const program = new Template(source).parsed as unknown as Node;
  const bound = new Set<string>();
  const used = new Set<string>();

  const bind = (target: unknown) => {
    if (!isNode(target)) return;
    if (target.type === "Identifier") bound.add(target.value as string);
    else if (target.type === "TupleLiteral" || target.type === "ArrayLiteral") for (const t of target.value as unknown[]) bind(t);
    // `set ns.x = …` writes a member: it reads `ns`.
    else visit(target);
  };
  const bindParameters = (params: unknown) => {
    for (const p of (params as unknown[] | null) ?? []) {
      if (!isNode(p)) continue;
      if (p.type === "KeywordArgumentExpression") {
        bind(p.key);
        visit(p.value);
      } else bind(p);
    }
  };
  const visitFilter = (filter: unknown) => {
    // A filter's name is not a variable; its arguments are expressions.
    if (isNode(filter) && filter.type === "CallExpression") for (const a of filter.args as unknown[]) visit(a);
  };

  function visit(node: unknown): void {
    if (Array.isArray(node)) {
      for (const n of node) visit(n);
      return;
    }
    if (node instanceof Map) {
      for (const [k, v] of node) {
        visit(k);
        visit(v);
      }
      return;
    }
    if (!isNode(node)) return;
    switch (node.type) {
      case "Identifier":
        used.add(node.value as string);
        return;
      case "For":
        bind(node.loopvar);
        visit(node.iterable);
        visit(node.body);
        visit(node.defaultBlock);
        return;
      case "Set":
        bind(node.assignee);
        visit(node.value);
        visit(node.body);
        return;
      case "Macro":
        bind(node.name);
        bindParameters(node.args);
        visit(node.body);
        return;
      case "CallStatement":
        visit(node.call);
        bindParameters(node.callerArgs);
        visit(node.body);
        return;
      case "MemberExpression":
        visit(node.object);
        if (node.computed) visit(node.property);
        return;
      case "FilterExpression":
        visit(node.operand);
        visitFilter(node.filter);
        return;
      case "FilterStatement":
        visitFilter(node.filter);
        visit(node.body);
        return;
      case "TestExpression":
        // The test's name (`defined`, `string`, …) is not a variable.
        visit(node.operand);
        return;
      case "KeywordArgumentExpression":
        visit(node.value);
        return;
      // Operators are lexer tokens (`and`, `in` lex as identifiers): only the operands are read.
      case "BinaryExpression":
        visit(node.left);
        visit(node.right);
        return;
      case "UnaryExpression":
        visit(node.argument);
        return;
      default:
        for (const [key, child] of Object.entries(node)) if (key !== "type") visit(child);
    }
  }

  visit(program);
  return new Set([...used].filter((n) => !bound.has(n) && !GLOBALS.has(n)));
}
