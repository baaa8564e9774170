// Minimal canvas line plots for the tuning page (no dependencies; part of embodied, Apache-2.0).
"use strict";

class LinePlot {
  /**
   * @param {HTMLCanvasElement} canvas
   * @param {{series: {key: string, label: string, color: string, dash?: number[], step?: boolean}[],
   *          window?: number, yMin?: number, yMax?: number, unit?: string}} opts
   *   window: seconds of history shown; yMin/yMax: fixed limits (auto range otherwise).
   */
  constructor(canvas, opts) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.series = opts.series;
    this.window = opts.window || 20;
    this.yMin = opts.yMin;
    this.yMax = opts.yMax;
    this.unit = opts.unit || "";
    this.x = [];
    this.y = this.series.map(() => []);
    this.marks = []; // x positions of episode starts
    this.maxPoints = 20000;
    this.dirty = true;
  }

  /** Append one point: x in seconds (monotonic), values keyed like the series. */
  push(x, values) {
    this.x.push(x);
    this.series.forEach((s, i) => {
      const v = values[s.key];
      this.y[i].push(v === null || v === undefined || !isFinite(v) ? NaN : Number(v));
    });
    if (this.x.length > this.maxPoints) {
      const cut = this.x.length - this.maxPoints;
      this.x.splice(0, cut);
      this.y.forEach((arr) => arr.splice(0, cut));
    }
    this.dirty = true;
  }

  mark(x) { this.marks.push(x); if (this.marks.length > 200) this.marks.shift(); }

  /** Replace all data (e.g. a finished step-response trace). */
  setData(xs, columns) {
    this.x = xs.slice();
    this.y = this.series.map((s) => (columns[s.key] || []).map((v) => (v === null ? NaN : v)));
    this.marks = [];
    this.window = xs.length ? Math.max(1e-6, xs[xs.length - 1] - xs[0]) : this.window;
    this.dirty = true;
  }

  _resize() {
    const dpr = window.devicePixelRatio || 1;
    const w = this.canvas.clientWidth, h = this.canvas.clientHeight;
    if (this.canvas.width !== Math.round(w * dpr) || this.canvas.height !== Math.round(h * dpr)) {
      this.canvas.width = Math.round(w * dpr);
      this.canvas.height = Math.round(h * dpr);
    }
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return [w, h];
  }

  draw() {
    if (!this.dirty) return;
    this.dirty = false;
    const [w, h] = this._resize();
    const ctx = this.ctx;
    const pad = { l: 46, r: 8, t: 18, b: 18 };
    ctx.clearRect(0, 0, w, h);
    ctx.fillStyle = "#11151c";
    ctx.fillRect(0, 0, w, h);
    const n = this.x.length;
    const xMax = n ? this.x[n - 1] : this.window;
    const xMin = xMax - this.window;
    let i0 = 0;
    while (i0 < n && this.x[i0] < xMin) i0++;
    let lo = Infinity, hi = -Infinity;
    for (const arr of this.y) {
      for (let i = i0; i < n; i++) { const v = arr[i]; if (v < lo) lo = v; if (v > hi) hi = v; }
    }
    if (this.yMin !== undefined) lo = this.yMin;
    if (this.yMax !== undefined) hi = this.yMax;
    if (!isFinite(lo) || !isFinite(hi)) { lo = 0; hi = 1; }
    if (hi - lo < 1e-9) { hi += 0.5 * Math.max(1e-3, Math.abs(hi)); lo -= 0.5 * Math.max(1e-3, Math.abs(lo)); }
    const span = hi - lo; lo -= 0.05 * span; hi += 0.05 * span;
    const px = (x) => pad.l + ((x - xMin) / (xMax - xMin)) * (w - pad.l - pad.r);
    const py = (y) => pad.t + (1 - (y - lo) / (hi - lo)) * (h - pad.t - pad.b);
    // grid and y labels
    ctx.strokeStyle = "#2a313d"; ctx.fillStyle = "#8b95a5"; ctx.lineWidth = 1;
    ctx.font = "10px sans-serif"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    for (let k = 0; k <= 4; k++) {
      const v = lo + (k / 4) * (hi - lo), y = py(v);
      ctx.beginPath(); ctx.moveTo(pad.l, y); ctx.lineTo(w - pad.r, y); ctx.stroke();
      ctx.fillText(fmt(v), pad.l - 4, y);
    }
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    ctx.fillText(`${this.window.toFixed(0)} s window`, (w + pad.l) / 2, h - pad.b + 4);
    // episode marks
    ctx.setLineDash([3, 3]); ctx.strokeStyle = "#4b5566";
    for (const m of this.marks) {
      if (m < xMin) continue;
      ctx.beginPath(); ctx.moveTo(px(m), pad.t); ctx.lineTo(px(m), h - pad.b); ctx.stroke();
    }
    ctx.setLineDash([]);
    // series
    this.series.forEach((s, si) => {
      const arr = this.y[si];
      ctx.strokeStyle = s.color; ctx.lineWidth = 1.6; ctx.setLineDash(s.dash || []);
      ctx.beginPath();
      let pen = false;
      for (let i = i0; i < n; i++) {
        const v = arr[i];
        if (!isFinite(v)) { pen = false; continue; }
        const X = px(this.x[i]), Y = py(v);
        if (!pen) { ctx.moveTo(X, Y); pen = true; }
        else if (s.step) { ctx.lineTo(X, py(arr[i - 1])); ctx.lineTo(X, Y); }
        else ctx.lineTo(X, Y);
      }
      ctx.stroke();
    });
    ctx.setLineDash([]);
    // legend
    ctx.textAlign = "left"; ctx.textBaseline = "top";
    let lx = pad.l + 4;
    this.series.forEach((s) => {
      ctx.fillStyle = s.color; ctx.fillRect(lx, 4, 10, 3);
      ctx.fillStyle = "#c8d0dc"; ctx.fillText(s.label, lx + 13, 0);
      lx += 18 + ctx.measureText(s.label).width + 10;
    });
  }
}

function fmt(v) {
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 1000 || a < 0.01) return v.toExponential(1);
  return v.toPrecision(3);
}

window.LinePlot = LinePlot;
