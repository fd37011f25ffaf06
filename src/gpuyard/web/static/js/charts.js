// Line charts with the vendored uPlot (loaded on first use; it defines the global `uPlot`).
// Colours come from the page's CSS variables, so charts follow light and dark.

import { h, localTime, clockTime } from "./dom.js";

let loading = null;

export function loadUplot() {
  if (window.uPlot) return Promise.resolve(window.uPlot);
  if (!loading) {
    loading = new Promise((resolve, reject) => {
      document.head.append(h("link", { rel: "stylesheet", href: "/ui/static/vendor/uplot/uPlot.min.css" }));
      const script = h("script", { src: "/ui/static/vendor/uplot/uPlot.iife.min.js" });
      script.addEventListener("load", () => resolve(window.uPlot));
      script.addEventListener("error", () => { loading = null; reject(new Error("the chart library did not load")); });
      document.head.append(script);
    });
  }
  return loading;
}

const PALETTE = ["#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#06b6d4", "#ec4899", "#84cc16"];

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

/** A chart in `box` (a .chart element): `data` as uPlot takes it ([xs, ys...], xs in epoch
 * seconds), one entry per line in `lines` ({label, unit}). Returns {update(data), destroy()}. */
export async function lineChart(box, title, lines, data, { height = 180, yRange = null } = {}) {
  const uPlot = await loadUplot();
  const axis = { stroke: cssVar("--muted"), grid: { stroke: cssVar("--line"), width: 1 }, ticks: { stroke: cssVar("--line") } };
  const plotBox = h("div");
  const label = h("h3", title);
  box.replaceChildren(label, plotBox);
  const width = () => Math.max(240, box.clientWidth - 16);
  const opts = {
    width: width(),
    height,
    legend: { live: true },
    cursor: { drag: { x: true, y: false } },
    scales: { x: { time: true }, y: yRange ? { range: yRange } : { auto: true } },
    // 24-hour times, as the rest of the page and the CLI (uPlot's own are 12-hour, US dates).
    axes: [{ ...axis, values: timeTicks }, { ...axis, size: 56 }],
    series: [
      { label: "time", value: (u, v) => (v === null || v === undefined ? "–" : localTime(v)) },
      ...lines.map((line, i) => ({
        label: line.label,
        stroke: PALETTE[i % PALETTE.length],
        width: 1.6,
        spanGaps: false,
        value: (u, v) => (v === null || v === undefined ? "–" : `${+v.toFixed(Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 1 ? 2 : 4)}${line.unit || ""}`),
      })),
    ],
  };
  const plot = new uPlot(opts, data, plotBox);
  const resize = new ResizeObserver(() => plot.setSize({ width: width(), height }));
  resize.observe(box);
  box.setAttribute("role", "img");
  box.setAttribute("aria-label", `${title}: chart of ${lines.map((l) => l.label).join(", ")}`);
  return {
    update(next) { plot.setData(next); },
    destroy() { resize.disconnect(); plot.destroy(); },
  };
}

/** The x axis's tick labels: "14:05" (seconds on a span under 5 minutes), with the date
 * where the day changes on a span over a day. */
function timeTicks(u, splits) {
  const span = splits.length > 1 ? splits[splits.length - 1] - splits[0] : 0;
  let day = null;
  return splits.map((v) => {
    const time = clockTime(v, span < 300);
    if (span < 86400) return time;
    const date = localTime(v).slice(5, 10);
    const label = date !== day ? `${date}\n${time}` : time;
    day = date;
    return label;
  });
}

/** [[t, v], ...] pairs to uPlot's columns. */
export function columns(pairs) {
  return [pairs.map((p) => p[0]), pairs.map((p) => p[1])];
}

/** Several [xs, ys] tables on one x axis (uPlot.join: nulls where a table has no point). */
export async function joined(tables) {
  const uPlot = await loadUplot();
  if (tables.length === 1) return tables[0];
  return uPlot.join(tables);
}
