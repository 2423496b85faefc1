// The model's compile thread computes the built-in budget tables (json_object's and the formats')
// once it has the vocabulary, hands each part over, and says when all are done; a thread started
// again (after an idle end or a restart) gets the parts finished before and computes only the rest,
// or nothing once they were all done; compile jobs are answered while it works.
import { afterEach, expect, test } from "bun:test";
import { type BuiltInPart, shareVocabulary, tokenVocabulary } from "../../../src/structured/index.ts";
import type { CompileReply, CompileRequest } from "../../../src/engine/worker/compile-protocol.ts";
import { sentencePieceTokenizerJson } from "../../structured/helpers.ts";

const WORKER = new URL("../../../src/engine/worker/compile-worker.ts", import.meta.url).href;
const { data: vocab } = shareVocabulary(tokenVocabulary(sentencePieceTokenizerJson()));
const LIMITS = { maxStates: 50_000, maxSchemaBytes: 1 << 20, maxDepth: 64, maxRepeat: 4096, maxPatternLength: 4096, maxMillis: 5000 };

const threads: Worker[] = [];
afterEach(() => {
  for (const w of threads.splice(0)) w.terminate();
});

/** A compile thread inited with the parts finished before: all its replies, and the next of a type. */
function start(builtIns: BuiltInPart[], builtInsDone: boolean): { thread: Worker; replies: CompileReply[]; next: (type: CompileReply["type"]) => Promise<CompileReply> } {
  const thread = new Worker(WORKER);
  threads.push(thread);
  const replies: CompileReply[] = [];
  const unread = new Map<string, CompileReply[]>();
  const waiting = new Map<string, Array<(r: CompileReply) => void>>();
  thread.addEventListener("message", (e: MessageEvent<CompileReply>) => {
    replies.push(e.data);
    const reader = waiting.get(e.data.type)?.shift();
    if (reader) reader(e.data);
    else unread.set(e.data.type, [...(unread.get(e.data.type) ?? []), e.data]);
  });
  thread.postMessage({ type: "init", cancel: new SharedArrayBuffer(4), compiling: null, vocab, builtIns, builtInsDone } satisfies CompileRequest);
  const next = (type: CompileReply["type"]) => {
    const r = unread.get(type)?.shift();
    return r ? Promise.resolve(r) : new Promise<CompileReply>((resolve) => waiting.set(type, [...(waiting.get(type) ?? []), resolve]));
  };
  return { thread, replies, next };
}

const parts = (replies: CompileReply[]) => replies.flatMap((r) => (r.type === "built-in" ? [r.part] : []));

test("a new compile thread computes every part and answers compile jobs too; one started again computes only the parts it was not given, and none once all were done", async () => {
  const first = start([], false);
  // A job sent at once is answered (between steps of the tables), whether before or after they are done.
  const spec = { kind: "format" as const, format: { type: "json_object" as const } };
  first.thread.postMessage({ type: "compile", job: 1, spec, limits: LIMITS } satisfies CompileRequest);
  const compiled = await first.next("compiled");
  expect(compiled.type === "compiled" && compiled.grammar !== null).toBe(true);
  await first.next("built-ins-done");
  const all = parts(first.replies);
  expect(all.map((p) => p.name)).toEqual(expect.arrayContaining(["string", "integer", "number", "format email", "format uuid", "json_object"]));
  // Tables in shared memory: posting them again shares, never copies, them.
  for (const p of all) for (const r of p.tables.rules) expect(r.exitNodes.buffer).toBeInstanceOf(SharedArrayBuffer);

  const given = all.slice(0, 3);
  const again = start(given, false);
  await again.next("built-ins-done");
  expect(parts(again.replies).map((p) => p.name)).toEqual(all.slice(3).map((p) => p.name));

  // All of them done: the thread takes them and computes nothing. (A thread that computed them
  // would have sent its first part within the time the first thread took for all of them; a
  // correct one passes whatever the wait.)
  const done = start(all, true);
  done.thread.postMessage({ type: "compile", job: 2, spec, limits: LIMITS } satisfies CompileRequest);
  await done.next("compiled");
  await Bun.sleep(Math.max(200, all.reduce((n, p) => n + p.ms, 0) * 2));
  expect(done.replies.map((r) => r.type)).toEqual(["compiled"]);
}, 60_000);
