// Time plots of the tuning page on uPlot (static/vendor/, MIT): round ticks in one format per
// axis with units, a labelled time axis, every series in the legend, drag to zoom, wheel to pan,
// double-click to follow live again, freeze, PNG and CSV export of the window, episode
// boundaries and horizontal reference lines (setpoint band, output limits).
"use strict";

/** Tick labels with one number format per axis: as many decimals as the tick step needs (the
 *  unit is in the axis title). */
function tickFormatter() {
  return (u, splits) => {
    if (!splits.length) return [];
    const step = splits.length > 1 ? Math.abs(splits[1] - splits[0]) : Math.abs(splits[0]) || 1;
    // the fewest decimals that write the step exactly (2.5 needs one, 0.25 two), so no two
    // ticks round to labels an uneven distance apart
    let decimals = 0;
    while (decimals < 6 && Math.abs(step * 10 ** decimals - Math.round(step * 10 ** decimals)) > 1e-6) decimals++;
    return splits.map((v) => (Math.abs(v) < step * 1e-6 ? 0 : v).toFixed(decimals));
  };
}

/** Auto y range with nice limits and a least span (5 % of the magnitude, or 1e-3), so a
 *  near-constant signal gets readable ticks instead of one repeated label. */
function yRange(u, min, max) {
  if (min === null || max === null || !isFinite(min) || !isFinite(max)) return [0, 1];
  const mid = (min + max) / 2, least = Math.max(0.05 * Math.abs(mid), 1e-3);
  if (max - min < least) { min = mid - least / 2; max = mid + least / 2; }
  return uPlot.rangeNum(min, max, 0.1, true);
}

class TimePlot {
  /**
   * @param {HTMLElement} el  container
   * @param {{title: string, unit: string, series: {key: string, label: string, color: string,
   *          dash?: number[], width?: number, step?: boolean}[], window?: number,
   *          yRange?: [number, number]}} opts
   *   window: seconds shown while following live; yRange: fixed y limits (auto otherwise).
   */
  constructor(el, opts) {
    this.el = el;
    this.opts = opts;
    this.window = opts.window || 30;
    this.keys = opts.series.map((s) => s.key);
    this.data = [[], ...opts.series.map(() => [])];
    this.marks = [];   // x of episode boundaries (s)
    this.hlines = [];  // {y, color, dash, label}
    this.frozen = false;
    this.follow = true;  // follow the newest samples (false after a zoom or pan)
    this.maxPoints = 20000;
    this.ticks = { x: [], y: [] };  // the labels last drawn (read by the browser tests)
    this.dirty = true;
    const self = this;
    const fmt = tickFormatter();
    this._ours = true;  // scale changes while building are ours, not a zoom
    this.u = new uPlot({
      title: opts.title,
      width: Math.max(200, el.clientWidth || 600),
      height: opts.height || 240,
      scales: {
        x: { time: false, auto: false },
        y: opts.yRange ? { auto: false, range: () => opts.yRange } : { auto: true, range: yRange },
      },
      axes: [
        { label: "time (s)", stroke: "#8b95a5", grid: { stroke: "#2a313d" }, ticks: { stroke: "#2a313d" },
          values: (u, splits) => (self.ticks.x = fmt(u, splits)) },
        { label: opts.unit ? `${opts.title} (${opts.unit})` : opts.title, stroke: "#8b95a5", size: 64, space: 22,
          grid: { stroke: "#2a313d" }, ticks: { stroke: "#2a313d" },
          values: (u, splits) => (self.ticks.y = fmt(u, splits)) },
      ],
      series: [
        { label: "t (s)", value: (u, v) => (v === null ? "-" : v.toFixed(2)) },
        ...opts.series.map((s) => ({
          label: s.label, stroke: s.color, width: s.width || 1.6, dash: s.dash, spanGaps: false,
          paths: s.step ? uPlot.paths.stepped({ align: 1 }) : undefined,
          value: (u, v) => (v === null || v === undefined ? "-" : Number(v).toPrecision(4)),
        })),
      ],
      cursor: { drag: { x: true, y: false, setScale: true } },
      legend: { show: true, live: true },
      hooks: {
        // a zoom by dragging (any x scale change we did not make) stops following live
        setScale: [(u, key) => {
          if (key !== "x" || self._ours) return;
          self.follow = false;
          self._view = [u.scales.x.min, u.scales.x.max];
        }],
        draw: [(u) => self._drawOverlay(u)],
      },
    }, this.data, el);
    this._ours = false;
    el.addEventListener("dblclick", () => { this.follow = true; this.dirty = true; });
    el.addEventListener("wheel", (ev) => this._pan(ev), { passive: false });
    new ResizeObserver(() => { this.u.setSize({ width: Math.max(200, el.clientWidth), height: opts.height || 240 }); })
      .observe(el);
  }

  _xRange() {
    const xs = this.data[0];
    if (this.follow || this._view === undefined) {
      const hi = xs.length ? xs[xs.length - 1] : this.window;
      return [Math.max(xs.length ? xs[0] : 0, hi - this.window), Math.max(hi, this.window * 0.05)];
    }
    return this._view;
  }

  _pan(ev) {
    ev.preventDefault();
    const [lo, hi] = [this.u.scales.x.min, this.u.scales.x.max];
    const span = hi - lo;
    const shift = (ev.deltaY + ev.deltaX) / 600 * span;
    this.follow = false;
    this._view = [lo + shift, hi + shift];
    this._setX(this._view);
  }

  _setX([min, max]) {
    this._ours = true;
    try { this.u.setScale("x", { min, max }); } finally { this._ours = false; }
  }

  /** Append one sample: x in seconds (monotonic), values keyed like the series. */
  push(x, row) {
    this.data[0].push(x);
    this.keys.forEach((k, i) => {
      const v = row[k];
      this.data[i + 1].push(v === null || v === undefined || !isFinite(v) ? null : Number(v));
    });
    if (this.data[0].length > this.maxPoints) this.data.forEach((a) => a.splice(0, a.length - this.maxPoints));
    this.dirty = true;
  }

  /** Mark an episode boundary at x (s). */
  mark(x) { this.marks.push(x); if (this.marks.length > 500) this.marks.shift(); this.dirty = true; }

  /** Horizontal reference lines (e.g. output limits, the settling band). */
  setLines(lines) { this.hlines = lines; this.dirty = true; }

  /** Replace all data (a finished step-response trace). */
  setData(xs, columns) {
    this.data = [xs.slice(), ...this.keys.map((k) => (columns[k] || []).map((v) => (v === null ? null : v)))];
    this.marks = [];
    this.window = xs.length ? Math.max(1e-6, xs[xs.length - 1] - xs[0]) : this.window;
    this.follow = true;
    this.dirty = true;
  }

  setFrozen(frozen) { this.frozen = frozen; this.dirty = true; }

  draw() {
    if (!this.dirty || this.frozen) return;
    this.dirty = false;
    if (this.follow) this._view = undefined;
    const [lo, hi] = this._xRange();
    // hand uPlot a copy (of the window, when following): the arrays keep growing, and a frozen
    // view must not change under the person's eyes
    const xs = this.data[0];
    let i0 = 0;
    if (this.follow) { let a = 0, b = xs.length; while (a < b) { const m = (a + b) >> 1; if (xs[m] < lo) a = m + 1; else b = m; } i0 = Math.max(0, a - 1); }
    this._ours = true;
    try { this.u.setData(this.data.map((col) => col.slice(i0)), false); } finally { this._ours = false; }
    this._setX([lo, hi]);
  }

  _drawOverlay(u) {
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    ctx.save();
    ctx.lineWidth = devicePixelRatio || 1;
    ctx.setLineDash([4, 4]);
    ctx.strokeStyle = "#6b7688";
    for (const m of this.marks) {
      const X = u.valToPos(m, "x", true);
      if (X < left || X > left + width) continue;
      ctx.beginPath(); ctx.moveTo(X, top); ctx.lineTo(X, top + height); ctx.stroke();
    }
    for (const l of this.hlines) {
      if (l.y === null || l.y === undefined || !isFinite(l.y)) continue;
      const Y = u.valToPos(l.y, "y", true);
      if (Y < top || Y > top + height) continue;
      ctx.strokeStyle = l.color; ctx.setLineDash(l.dash || [2, 3]);
      ctx.beginPath(); ctx.moveTo(left, Y); ctx.lineTo(left + width, Y); ctx.stroke();
    }
    ctx.restore();
  }

  /** The samples in the visible window as CSV (header: time and series labels with units). */
  csv() {
    const [lo, hi] = [this.u.scales.x.min, this.u.scales.x.max];
    const unit = this.opts.unit ? ` (${this.opts.unit})` : "";
    const head = ["t (s)", ...this.opts.series.map((s) => `${s.label}${unit}`)];
    const rows = [head.join(",")];
    this.data[0].forEach((x, i) => {
      if (x < lo || x > hi) return;
      rows.push([x, ...this.keys.map((_, j) => (this.data[j + 1][i] ?? ""))].join(","));
    });
    return rows.join("\n") + "\n";
  }

  /** The plot (with its legend values) as a PNG data URL. */
  png() { return this.u.ctx.canvas.toDataURL("image/png"); }
}

window.TimePlot = TimePlot;
window.tickFormatter = tickFormatter;
