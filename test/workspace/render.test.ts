// Rendering pieces: escaping, CSV, date ranges, charts.
import { expect, test } from "bun:test";
import { barChart, niceCeiling } from "../../src/workspace/charts.ts";
import { html, raw } from "../../src/workspace/html.ts";
import { fillDays, usageCsv, usageRange } from "../../src/workspace/pages/usage.ts";

test("interpolations are escaped unless already Html", () => {
  const label = `<script>alert("x")</script>&'`;
  expect(html`<td>${label}</td>`.value).toBe("<td>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;</td>");
  expect(html`<p>${raw("<b>ok</b>")}${[1, null, "<"]}</p>`.value).toBe("<p><b>ok</b>1&lt;</p>");
});

test("CSV quotes fields and defuses spreadsheet formulas", () => {
  const row = { id: 1, requestId: "r,1", accountId: 1, keyId: null, modelId: "m/a", promptTokens: 3, completionTokens: 4, cachedTokens: 2, reasoningTokens: 1, latencyMs: 5, status: "ok", finishReason: "stop", user: "=HYPERLINK(1)", metadata: null, createdAt: 0 };
  const [head, line] = usageCsv([row]).trim().split("\r\n");
  expect(head).toBe("time,request_id,model,prompt_tokens,cached_tokens,completion_tokens,reasoning_tokens,total_tokens,latency_ms,status,finish_reason,key_id,user");
  expect(line).toBe(`1970-01-01T00:00:00.000Z,"r,1",m/a,3,2,4,1,7,5,ok,stop,,'=HYPERLINK(1)`);
});

test("date ranges: defaults, swapped ends, inclusive days, zero-filled", () => {
  const now = Date.UTC(2026, 2, 15, 12);
  const d = usageRange(new URL("http://x/usage"), now);
  expect([d.from, d.to]).toEqual(["2026-03-02", "2026-03-15"]);
  const s = usageRange(new URL("http://x/usage?from=2026-03-10&to=2026-03-01"), now);
  expect([s.from, s.to, s.until - s.since]).toEqual(["2026-03-01", "2026-03-10", 10 * 86_400_000]);
  expect(usageRange(new URL("http://x/usage?from=2026-02-30"), now).from).toBe("2026-03-02");
  const days = fillDays([{ day: "2026-03-02", requests: 2, promptTokens: 1, completionTokens: 1, cachedTokens: 0, reasoningTokens: 0 }], Date.UTC(2026, 2, 1), Date.UTC(2026, 2, 4));
  expect(days.map((x) => [x.day, x.requests])).toEqual([["2026-03-01", 0], ["2026-03-02", 2], ["2026-03-03", 0]]);
});

test("bar charts scale to a round ceiling and title every bar", () => {
  expect([niceCeiling(0), niceCeiling(3), niceCeiling(11), niceCeiling(2000), niceCeiling(2001)]).toEqual([1, 5, 20, 2000, 5000]);
  const svg = barChart({ title: "Requests", unit: "requests", labels: ["2026-03-01", "2026-03-02"], series: [{ name: "requests", cls: "s1", values: [0, 4] }] }).value;
  // One bar (zero draws none) in each drawing, the wide and the phone's, and the legend swatch.
  expect(svg.match(/<rect /g)?.length).toBe(3);
  expect(svg.match(/<svg class="plot (wide|narrow)"/g)).toEqual(['<svg class="plot wide"', '<svg class="plot narrow"']);
  expect(svg).toContain("<title>2026-03-02: 4 requests</title>");
  expect(svg).toContain('aria-label="Requests: 2 bars, highest 4 requests"');
});
