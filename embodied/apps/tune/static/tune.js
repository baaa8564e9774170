// embodied tune page logic: WebSocket telemetry in, validated commands out.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const PARAMS = ["kp", "ki", "kd", "output_min", "output_max", "rate_limit", "tau_d", "anti_windup",
    "tracking_gain", "kff", "bias", "direction"];
  const COLORS = { meas: "#5ab0ff", sp: "#ffb347", out: "#c792ea", knob: "#7fdbca", act: "#9ccc65", prog: "#f07178", succ: "#ffd866", lim: "#ef5350", band: "#ffb34766" };
  const plots = {
    concept: new TimePlot($("plot-concept"), { title: "measured concept", unit: "", series: [
      { key: "measurement", label: "measured", color: COLORS.meas },
      { key: "setpoint", label: "setpoint", color: COLORS.sp, dash: [6, 3], step: true }] }),
    output: new TimePlot($("plot-output"), { title: "controller output", unit: "", series: [
      { key: "output", label: "controller output", color: COLORS.out, width: 2.4 },
      { key: "knob", label: "knob applied", color: COLORS.knob, dash: [5, 4], width: 1.8 }] }),
    action: new TimePlot($("plot-action"), { title: "|action|", unit: "", height: 190,
      series: [{ key: "action_norm", label: "|action|", color: COLORS.act }] }),
    progress: new TimePlot($("plot-progress"), { title: "task", unit: "", height: 190, yRange: [-0.05, 1.05], series: [
      { key: "progress", label: "progress", color: COLORS.prog },
      { key: "success_f", label: "success", color: COLORS.succ, step: true }] }),
  };
  window.plots = plots;
  const stepPlot = new TimePlot($("plot-step"), { title: "last step test", unit: "", height: 220, series: [
    { key: "y", label: "measured", color: COLORS.meas },
    { key: "setpoint", label: "setpoint", color: COLORS.sp, dash: [6, 3], step: true }] });
  window.stepPlot = stepPlot;

  let ws = null, state = null, sampleCount = 0, frameCount = 0, clock = 0, lastEpisode = null, lastT = 0;
  const dirty = new Set();
  window.tune = { get state() { return state; }, get samples() { return sampleCount; }, batches: 0, frames: 0, last: null, stepResult: null, autotune: null, safety: [] };

  const fmt = (v, d = 3) => (v === null || v === undefined || Number.isNaN(v) ? "-" : Number(v).toPrecision(d));

  // banner: replies to commands and experiment results (stays until the next one); log: all
  function message(text, kind, banner = true) {
    if (banner) { const el = $("message"); el.textContent = text; el.className = "message " + kind; }
    const li = document.createElement("li");
    li.textContent = new Date().toLocaleTimeString() + "  " + text;
    if (kind === "error" || kind === "warn") li.className = kind;
    const log = $("log"); log.prepend(li);
    while (log.children.length > 30) log.lastChild.remove();
  }

  function send(obj) {
    if (!ws || ws.readyState !== WebSocket.OPEN) { message("not connected", "error"); return; }
    ws.send(JSON.stringify(obj));
  }

  function connect() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    ws = new WebSocket(`${proto}//${location.host}/ws${location.search}`);
    ws.onopen = () => { setStatus("connected", ""); };
    ws.onclose = (ev) => {
      setStatus("offline", "offline");
      message(`disconnected (${ev.code}${ev.reason ? ": " + ev.reason : ""}); retrying...`, "error");
      setTimeout(connect, 1500);
    };
    ws.onmessage = (ev) => handle(JSON.parse(ev.data));
  }

  function setStatus(text, cls) { const el = $("status"); el.textContent = text; el.className = "pill " + cls; }

  function handle(m) {
    switch (m.type) {
      case "hello": applyState(m.state, true); setFiles(m.files); break;
      case "state": applyState(m.state, false); break;
      case "telemetry": m.samples.forEach(addSample); window.tune.batches++; break;
      case "frame": $("camera").src = "data:image/jpeg;base64," + m.jpeg; frameCount++; window.tune.frames = frameCount;
        $("frame-count").textContent = `frame ${frameCount} (${m.shape[1]}x${m.shape[0]})`; break;
      case "ack": message("ok: " + m.message, "info"); break;
      case "error": message(m.message, "error"); break;
      case "step_result": showStep(m.result); message(m.message, "info"); break;
      case "autotune_candidate": addCandidate(m.candidate); message(m.message, "info", false); break;
      case "autotune_done": showAutotune(m.result); message(m.message, "info"); break;
      case "safety": message(m.message, "warn", false); window.tune.safety.push(m.event);
        $("val-safety").textContent = `${m.total}`; break;
      case "saved": case "files": setFiles(m.files); if (m.message) message(m.message, "info"); break;
      case "loaded": dirty.clear(); message(m.message, "info"); break;
      default: if (m.message) message(m.message, "info", false);  // episode_end, info
    }
  }

  function addSample(s) {
    if (s.episode !== lastEpisode) {
      if (lastEpisode !== null) { clock += 0.5; Object.values(plots).forEach((p) => p.mark(clock)); }
      lastEpisode = s.episode; lastT = s.t;
    }
    clock += Math.max(0, s.t - lastT); lastT = s.t;
    const row = { ...s, success_f: s.success ? 1 : 0 };
    Object.values(plots).forEach((p) => p.push(clock, row));
    sampleCount++;
    window.tune.last = s;
  }

  function render() {
    Object.values(plots).forEach((p) => p.draw());
    stepPlot.draw();
    const s = window.tune.last;
    $("sample-count").textContent = sampleCount;
    if (s) {
      $("val-measurement").textContent = fmt(s.measurement);
      $("val-setpoint").textContent = fmt(s.setpoint);
      $("val-output").textContent = fmt(s.output);
      $("val-action").textContent = fmt(s.action_norm);
      $("val-progress").textContent = fmt(s.progress, 2);
      $("val-success").textContent = s.success ? "yes" : "no";
      $("val-mode").textContent = s.mode;
      if (s.safety_events !== null && s.safety_events !== undefined) {
        $("val-safety").textContent = s.estopped ? `${s.safety_events} (E-STOP)` : `${s.safety_events}`;
      }
    }
    requestAnimationFrame(render);
  }

  function setInput(id, value) {
    if (dirty.has(id) || document.activeElement === $(id)) return;
    $(id).value = value === null || value === undefined ? "" : String(value);
  }

  function applyState(st, first) {
    state = st;
    $("task").textContent = `${st.env_id} · ${st.concept} [${st.units}] → ${st.knob} · "${st.instruction}"`;
    $("unit").textContent = `(${st.concept}, ${st.units})`;
    if (first) {  // axis titles and units from the task
      for (const p of [plots.concept, stepPlot]) { p.opts.unit = st.units; p.opts.title = `${st.concept}`; }
      plots.output.opts.title = `${st.knob}`;
      rebuildAxes();
    }
    $("knob-name").textContent = st.knob;
    $("episode").textContent = st.episode; $("seed").textContent = st.seed;
    setStatus(st.busy ? st.status : st.paused ? "paused" : st.status, st.busy ? "busy" : st.paused ? "paused" : "running");
    setInput("setpoint", st.setpoint);
    const pid = st.params.pid || {};
    PARAMS.forEach((p) => setInput(p, pid[p]));
    // reference lines: the output limits, and the settling band around the setpoint
    const lines = [];
    if (st.mode === "pid") {
      lines.push({ y: pid.output_min, color: COLORS.lim, dash: [2, 3] }, { y: pid.output_max, color: COLORS.lim, dash: [2, 3] });
    }
    plots.output.setLines(lines);
    const band = (st.settle_band || 0.02) * Math.abs((st.step_to ?? st.setpoint) - (st.step_from ?? 0));
    plots.concept.setLines([{ y: st.setpoint + band, color: COLORS.band, dash: [1, 3] }, { y: st.setpoint - band, color: COLORS.band, dash: [1, 3] }]);
    setInput("fixed-value", (st.params.fixed || {}).value);
    if (!dirty.has("ctrl-type") && document.activeElement !== $("ctrl-type")) $("ctrl-type").value = st.mode;
    if (first) {  // the step defaults are the CLI's (TuneConfig.step_from / step_to)
      const [lo, hi] = st.setpoint_range;
      setInput("step-from", st.step_from);
      setInput("step-to", st.step_to);
      $("setpoint").title = `allowed: [${lo}, ${hi}] ${st.units}`;
    }
    $("apply-proposal").disabled = !st.proposal;
  }

  function setFiles(files) {
    const sel = $("load-name"); const keep = sel.value;
    sel.innerHTML = "";
    (files || []).forEach((f) => { const o = document.createElement("option"); o.value = f; o.textContent = f; sel.append(o); });
    if ((files || []).includes(keep)) sel.value = keep;
  }

  function showStep(r) {
    window.tune.stepResult = r;
    const units = state ? state.units : "";
    $("step-start").textContent = r.start_settled ? `yes (${fmt(r.dwell_s, 2)} s in ${r.settle_band_pct} %)` : "no (timeout)";
    $("step-rise").textContent = r.rise_time_s === null ? "n/a" : `${fmt(r.rise_time_s)} s`;
    $("step-overshoot").textContent = r.overshoot_pct === null ? "n/a" : `${fmt(r.overshoot_pct)} %`;
    $("step-settling").textContent = r.settling_time_s === null ? "not settled" : `${fmt(r.settling_time_s)} s (${r.settle_band_pct} %)`;
    $("step-sse").textContent = r.steady_state_error === null ? "n/a" : `${fmt(r.steady_state_error)} ${units}`;
    $("step-iae").textContent = r.iae === null ? "n/a" : `${fmt(r.iae)} ${units}·s`;
    $("step-itae").textContent = r.itae === null ? "n/a" : `${fmt(r.itae)} ${units}·s²`;
    $("step-verdict").textContent = r.acceptable ? "acceptable loop (settled within the overshoot limit)"
      : `not acceptable: ${r.settled ? "" : "did not settle; "}overshoot limit ${r.max_overshoot_pct} %`;
    stepPlot.setData(r.trace.t, { y: r.trace.y, setpoint: r.trace.setpoint });
    stepPlot.mark(r.step_time_s);
  }

  function addCandidate(c) {
    const tr = document.createElement("tr");
    const n = $("at-table").tBodies[0].children.length + 1;
    [n, fmt(c.kp), fmt(c.ki), fmt(c.score, 4), c.overshoot_pct === null ? "n/a" : fmt(c.overshoot_pct) + " %",
     c.settling_time_s === null ? "n/a" : fmt(c.settling_time_s) + " s"].forEach((v) => {
      const td = document.createElement("td"); td.textContent = v; tr.append(td); });
    $("at-table").tBodies[0].append(tr);
  }

  function showAutotune(r) {
    window.tune.autotune = r;
    if (!r.proposal) {
      $("at-result").textContent = `no gains settled within ${r.max_overshoot_pct} % overshoot: current gains kept`;
      $("apply-proposal").disabled = true;
      return;
    }
    $("at-result").textContent = `proposal: Kp=${fmt(r.proposal.kp, 4)} Ki=${fmt(r.proposal.ki, 4)} · score ${fmt(r.score, 4)} (current gains ${r.baseline_score === null ? "not settled" : fmt(r.baseline_score, 4)})`;
    const rows = $("at-table").tBodies[0].children;
    r.candidates.forEach((c, i) => { if (c.kp === r.proposal.kp && c.ki === r.proposal.ki && rows[i]) rows[i].classList.add("best"); });
    $("apply-proposal").disabled = false;
  }

  // inputs: remember edits until applied
  document.querySelectorAll("input, select").forEach((el) => el.addEventListener("input", () => dirty.add(el.id)));
  const val = (id) => $(id).value;
  const clean = (...ids) => ids.forEach((id) => dirty.delete(id));

  $("apply-setpoint").onclick = () => { send({ cmd: "setpoint", value: val("setpoint") }); clean("setpoint"); };
  $("apply-gains").onclick = () => {
    const params = {};
    PARAMS.forEach((p) => { if (dirty.has(p)) params[p] = val(p); });
    if (!Object.keys(params).length) PARAMS.slice(0, 3).forEach((p) => { params[p] = val(p); });
    if ("tracking_gain" in params && params.tracking_gain === "") params.tracking_gain = null;
    send({ cmd: "gains", type: "pid", params }); clean(...PARAMS);
  };
  $("apply-fixed").onclick = () => { send({ cmd: "gains", type: "fixed", params: { value: val("fixed-value") } }); clean("fixed-value"); };
  $("apply-type").onclick = () => {
    const msg = { cmd: "controller", type: val("ctrl-type") };
    if (msg.type === "rl" && val("rl-path")) msg.path = val("rl-path");
    send(msg); clean("ctrl-type");
  };
  for (const c of ["pause", "resume", "step", "reset"]) $(c).onclick = () => send({ cmd: c });
  $("new-seed").onclick = () => send({ cmd: "new_seed" });
  $("run-step").onclick = () => send({ cmd: "step_test", from: val("step-from"), to: val("step-to") });
  $("save").onclick = () => send({ cmd: "save", name: val("save-name") });
  $("load").onclick = () => send({ cmd: "load", name: val("load-name") });
  $("autotune").onclick = () => {
    $("at-table").tBodies[0].innerHTML = ""; $("at-result").textContent = "running...";
    send({ cmd: "autotune", budget: val("at-budget"), from: val("step-from"), to: val("step-to") });
  };
  $("stop-job").onclick = () => send({ cmd: "stop_job" });
  $("apply-proposal").onclick = () => { send({ cmd: "apply_proposal" }); dirty.clear(); };

  // plot tools: freeze, window length, export of the visible window
  $("freeze").onchange = () => { const f = $("freeze").checked; Object.values(plots).forEach((p) => p.setFrozen(f)); };
  $("window-s").onchange = () => {
    const w = Number(val("window-s"));
    if (!(w > 0 && w <= 600)) { message(`window ${val("window-s")} s: use 1-600 s`, "error"); return; }
    Object.values(plots).forEach((p) => { p.window = w; p.follow = true; p.dirty = true; });
  };
  const download = (name, href) => { const a = document.createElement("a"); a.href = href; a.download = name; document.body.append(a); a.click(); a.remove(); };
  $("export-png").onclick = () => Object.entries(plots).forEach(([k, p]) => download(`tune_${k}.png`, p.png()));
  $("export-csv").onclick = () => Object.entries(plots).forEach(([k, p]) =>
    download(`tune_${k}.csv`, URL.createObjectURL(new Blob([p.csv()], { type: "text/csv" }))));
  window.tune.csv = () => Object.fromEntries(Object.entries(plots).map(([k, p]) => [k, p.csv()]));

  function rebuildAxes() {  // units arrive with the first state: redraw axis titles
    for (const p of [...Object.values(plots), stepPlot]) {
      const label = p.opts.unit ? `${p.opts.title} (${p.opts.unit})` : p.opts.title;
      p.u.axes[1].label = label;
      p.u.root.querySelector(".u-title").textContent = p.opts.title;
      p.u.redraw(false, true);
    }
  }

  connect();
  requestAnimationFrame(render);
})();
