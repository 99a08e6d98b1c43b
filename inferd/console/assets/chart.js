// A line chart in SVG: the last points of one or more series, scaled to fit.
// Labelled as an image with its latest values, for screen readers.

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 300;
const HEIGHT = 90;

function svg(tag, attrs = {}) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

export class LineChart {
  // series: [{name, unit}]; `max` fixes the top of the scale (1 for ratios), else it follows the data.
  constructor(title, series, { max = null, points = 60, format = (v) => v.toFixed(1) } = {}) {
    this.title = title;
    this.series = series.map((s) => ({ ...s, values: [] }));
    this.max = max;
    this.points = points;
    this.format = format;
    this.plot = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, preserveAspectRatio: "none", role: "img" });
    this.legend = document.createElement("p");
    this.legend.className = "legend small";
    const heading = document.createElement("h2");
    heading.textContent = title;
    this.element = document.createElement("figure");
    this.element.className = "chart";
    this.element.append(heading, this.plot, this.legend);
  }

  push(...values) {
    this.series.forEach((s, i) => {
      s.values.push(values[i] ?? null);
      if (s.values.length > this.points) s.values.shift();
    });
    this.draw();
  }

  draw() {
    const all = this.series.flatMap((s) => s.values).filter((v) => v !== null);
    const top = this.max ?? Math.max(1e-9, ...all) * 1.15;
    const step = WIDTH / (this.points - 1);
    const lines = this.series.map((s, i) => {
      const offset = this.points - s.values.length;
      const d = s.values.map((v, n) => (v === null ? null : `${((offset + n) * step).toFixed(1)},${(HEIGHT - (v / top) * HEIGHT).toFixed(1)}`))
        .filter(Boolean).join(" ");
      return svg("polyline", { points: d, class: `line line-${i}`, fill: "none" });
    });
    const grid = [0.25, 0.5, 0.75].map((f) => svg("line", { x1: 0, x2: WIDTH, y1: HEIGHT * f, y2: HEIGHT * f, class: "grid" }));
    this.plot.replaceChildren(...grid, ...lines);
    const latest = this.series.map((s) => {
      const v = s.values.at(-1);
      return `${s.name} ${v === null || v === undefined ? "–" : this.format(v)}${s.unit ? ` ${s.unit}` : ""}`;
    });
    this.plot.setAttribute("aria-label", `${this.title}: ${latest.join(", ")}`);
    this.legend.replaceChildren(...latest.map((text, i) => {
      const item = document.createElement("span");
      item.className = `key key-${i}`;
      item.textContent = text;
      return item;
    }));
  }
}
