// Charts as inline SVG drawn on the server. No charting library: the pages need two chart shapes
// (bars over days, bars per model), SVG renders without script, works offline, and each bar
// carries a <title> for pointer and screen-reader users. Each chart is drawn twice, for a wide
// page and for a phone's (app.css shows one): scaled down through its viewBox, the wide drawing's
// labels would shrink to 6 px at 390 px.
import { html, join, type Html } from "./html.ts";
import { integer } from "./format.ts";

export interface Series {
  name: string;
  /** CSS class giving the fill colour (see app.css: .s1, .s2). */
  cls: string;
  values: number[];
}

/** 1, 2 or 5 times a power of ten, at least `max`: gridlines at round numbers. */
export function niceCeiling(max: number): number {
  if (max <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

/** A drawing's size in its own units: at a phone's width the narrow one is shown about 1:1. */
interface Frame {
  cls: "wide" | "narrow";
  w: number;
  h: number;
  left: number;
  /** About this many day labels fit under the bars. */
  labels: number;
}
const FRAMES: Frame[] = [
  { cls: "wide", w: 640, h: 220, left: 56, labels: 8 },
  { cls: "narrow", w: 340, h: 200, left: 44, labels: 4 },
];
const PAD = { right: 8, top: 12, bottom: 30 };

/** Stacked vertical bars, one per label (e.g. per day). */
export function barChart(opts: { title: string; labels: string[]; series: Series[]; unit: string }): Html {
  const { labels, series } = opts;
  const totals = labels.map((_, i) => series.reduce((s, x) => s + (x.values[i] ?? 0), 0));
  const top = niceCeiling(Math.max(0, ...totals));
  const summary = `${opts.title}: ${labels.length} bars, highest ${integer(Math.max(0, ...totals))} ${opts.unit}`;
  const draw = (f: Frame) => {
    const plotW = f.w - f.left - PAD.right;
    const plotH = f.h - PAD.top - PAD.bottom;
    const slot = plotW / Math.max(1, labels.length);
    const barW = Math.max(2, Math.min(36, slot * 0.7));
    const y = (v: number) => PAD.top + plotH - (v / top) * plotH;
    const grid = [0, 0.5, 1].map((fr) => {
      const v = top * fr;
      return html`<line class="grid" x1="${f.left}" x2="${f.w - PAD.right}" y1="${y(v)}" y2="${y(v)}"/><text class="tick" x="${f.left - 6}" y="${y(v) + 4}" text-anchor="end">${compact(v)}</text>`;
    });
    // Every label would collide on a month-long range: show a few.
    const every = Math.max(1, Math.ceil(labels.length / f.labels));
    const bars = labels.map((label, i) => {
      const x = f.left + slot * i + (slot - barW) / 2;
      let base = 0;
      const rects = series.map((s) => {
        const v = s.values[i] ?? 0;
        if (v <= 0) return "";
        const r = html`<rect class="${s.cls}" x="${x.toFixed(1)}" y="${y(base + v).toFixed(1)}" width="${barW.toFixed(1)}" height="${(y(base) - y(base + v)).toFixed(1)}"><title>${label}: ${integer(v)} ${s.name}</title></rect>`;
        base += v;
        return r;
      });
      const tick = i % every === 0 ? html`<text class="tick" x="${(x + barW / 2).toFixed(1)}" y="${f.h - 8}" text-anchor="middle">${label.length === 10 ? label.slice(5) : label}</text>` : "";
      return join([...rects, tick]);
    });
    return html`<svg class="plot ${f.cls}" viewBox="0 0 ${f.w} ${f.h}" role="img" aria-label="${summary}" preserveAspectRatio="xMidYMid meet">${grid}${bars}</svg>`;
  };
  return html`<figure class="chart">
  <figcaption>${opts.title}</figcaption>
  ${FRAMES.map(draw)}
  ${legend(series)}
</figure>`;
}

/** Horizontal bars with their label and value, one per row (e.g. per model). */
export function rowChart(opts: { title: string; rows: { label: string; values: number[] }[]; series: Omit<Series, "values">[]; unit: string }): Html {
  const rowH = 44;
  const h = Math.max(1, opts.rows.length) * rowH + 4;
  const max = Math.max(1, ...opts.rows.map((r) => r.values.reduce((a, b) => a + b, 0)));
  const summary = `${opts.title}: ${opts.rows.map((r) => `${r.label} ${integer(r.values.reduce((a, b) => a + b, 0))} ${opts.unit}`).join(", ")}`;
  const draw = (f: Frame) => {
    const plotW = f.w - 80;
    const rows = opts.rows.map((r, i) => {
      let x = 0;
      const total = r.values.reduce((a, b) => a + b, 0);
      const rects = r.values.map((v, k) => {
        const w = (v / max) * plotW;
        const s = opts.series[k]!;
        const out = html`<rect class="${s.cls}" x="${x.toFixed(1)}" y="${i * rowH + 22}" width="${Math.max(v > 0 ? 1 : 0, w).toFixed(1)}" height="16"><title>${r.label}: ${integer(v)} ${s.name}</title></rect>`;
        x += w;
        return out;
      });
      return html`<text class="rowlabel" x="0" y="${i * rowH + 16}">${r.label}</text>${rects}<text class="tick" x="${(x + 6).toFixed(1)}" y="${i * rowH + 36}">${integer(total)}</text>`;
    });
    return html`<svg class="plot ${f.cls}" viewBox="0 0 ${f.w} ${h}" role="img" aria-label="${summary}">${rows}</svg>`;
  };
  return html`<figure class="chart">
  <figcaption>${opts.title}</figcaption>
  ${FRAMES.map(draw)}
  ${opts.series.length > 1 ? legend(opts.series) : ""}
</figure>`;
}

function legend(series: Omit<Series, "values">[]): Html {
  return html`<ul class="legend">${series.map((s) => html`<li><svg width="10" height="10" aria-hidden="true"><rect class="${s.cls}" width="10" height="10"/></svg> ${s.name}</li>`)}</ul>`;
}

function compact(v: number): string {
  if (v >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (v >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  return String(+v.toFixed(1));
}
