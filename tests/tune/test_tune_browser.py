"""The tuning page in a real browser (Debian chromium via Playwright) on the built-in arm task.

One server (real MuJoCo ``mujoco:arm_reach``, scripted expert with speed knob ``alpha``,
real PID) and one page are shared by the tests of this module, which run in order like a
person's session: watch, tune, experiment, save/load, make mistakes, auto-tune.
"""

from __future__ import annotations

import itertools
import math
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from embodied.apps.tune import ServerConfig, TuneConfig, TuneSession
    from embodied.apps.tune.server import TuneServer
    from embodied.apps.tune.task import build_task

    cfg = TuneConfig(out_dir=tmp_path_factory.mktemp("tune-out"), setpoint=0.15)
    srv = TuneServer(TuneSession(build_task(cfg), cfg), ServerConfig(port=0))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def page(server: Any) -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (see .ci/run)")
    sync_api = require("playwright.sync_api")
    profile = tempfile.mkdtemp(prefix="tune-chromium-")
    with sync_api.sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=ARGS,
            viewport={"width": 1400, "height": 1100},
        )
        pg = ctx.new_page()
        pg.set_default_timeout(TIMEOUT_MS)
        console_errors: list[str] = []
        pg.on("pageerror", lambda exc: console_errors.append(str(exc)))
        pg.goto(server.url)
        pg.wait_for_function("window.tune && window.tune.samples > 0")
        yield pg
        assert not console_errors, f"JavaScript errors on the page: {console_errors}"
        ctx.close()
    shutil.rmtree(profile, ignore_errors=True)


def _wait(page: Any, expr: str, timeout_ms: int = TIMEOUT_MS) -> Any:
    """Wait until ``expr`` is truthy in the page and return its value (JSON); on timeout fail
    with what the page showed."""
    try:
        return page.wait_for_function(expr, timeout=timeout_ms).json_value()
    except Exception as exc:
        seen = page.evaluate(
            "({message: document.getElementById('message').textContent, "
            "log: document.getElementById('log').innerText.slice(0, 1500), "
            "last: window.tune.last, status: document.getElementById('status').textContent})"
        )
        pytest.fail(f"page never satisfied {expr!r} ({type(exc).__name__}); page showed {seen}")


def _fill(page: Any, selector: str, value: str) -> None:
    page.fill(selector, value)
    page.dispatch_event(selector, "input")


def _last(page: Any) -> dict[str, Any]:
    return page.evaluate("window.tune.last")


def _message(page: Any) -> tuple[str, str]:
    return page.inner_text("#message"), page.get_attribute("#message", "class") or ""


def _assert_round_ticks(ticks: list[str], where: str) -> None:
    """One format per axis (same decimals), evenly spaced round steps (1, 2, 2.5, 5 x 10^k)."""
    assert len(ticks) >= 2, f"{where}: {ticks}"
    decimals = {len(t.split(".")[1]) if "." in t else 0 for t in ticks}
    assert len(decimals) == 1, f"{where} mixes formats: {ticks}"
    values = [float(t) for t in ticks]
    steps = {round(b - a, 9) for a, b in itertools.pairwise(values)}
    assert len(steps) == 1, f"{where} uneven: {ticks}"
    step = steps.pop()
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 2.5, 5)), ticks


def test_page_streams_telemetry_plots_and_camera(page: Any, server: Any) -> None:
    n0 = page.evaluate("window.tune.samples")
    _wait(page, f"window.tune.samples >= {n0 + 20}")  # 20 new control steps
    assert int(page.inner_text("#sample-count")) >= n0 + 20
    _wait(page, "window.tune.frames >= 2")
    assert page.get_attribute("#camera", "src").startswith("data:image/jpeg;base64,")
    assert "arm_reach" in page.inner_text("#task")
    assert server.config.telemetry_hz >= 10
    # every plot (uPlot, served from static/vendor) has drawn lines
    for name in ("plot-concept", "plot-output", "plot-action", "plot-progress"):
        drawn = page.evaluate(
            """(id) => { const c = document.querySelector('#' + id + ' canvas'); const d = c.getContext('2d')
                 .getImageData(0, 0, c.width, c.height).data; let n = 0;
                 for (let i = 0; i < d.length; i += 4) if (d[i] > 60 || d[i+1] > 60 || d[i+2] > 60) n++;
                 return n; }""",
            name,
        )
        assert drawn > 200, f"{name} shows no data"
    page.wait_for_timeout(300)  # a few animation frames: the axes are drawn
    for key in ("concept", "output", "action", "progress"):
        plot = page.evaluate(
            f"""(() => {{ const p = window.plots.{key}; const u = p.u;
                 const [lo, hi] = [u.scales.x.min, u.scales.x.max];
                 const inWin = p.data[0].map((x, i) => x >= lo && x <= hi ? i : -1).filter(i => i >= 0);
                 return {{ xticks: p.ticks.x, yticks: p.ticks.y, xlabel: u.axes[0].label,
                   legend: [...u.root.querySelectorAll('.u-legend .u-series th')].map(e => e.textContent.trim()),
                   labels: u.series.slice(1).map(s => s.label),
                   finite: p.data.slice(1).map(col => inWin.filter(i => col[i] !== null).length) }}; }})()"""
        )
        assert plot["xlabel"] == "time (s)"
        for axis in ("xticks", "yticks"):
            _assert_round_ticks(plot[axis], f"{key} {axis}")
        # every legend entry has a trace with points in the visible window
        assert [t.strip() for t in plot["legend"][1:]] == plot["labels"], plot["legend"]
        assert all(n > 0 for n in plot["finite"]), f"{key}: a legend entry without a trace {plot}"
    s = _last(page)
    assert s["mode"] == "pid" and s["setpoint"] == pytest.approx(0.15)


def test_freeze_and_export_the_window(page: Any, server: Any) -> None:
    page.check("#freeze")
    page.dispatch_event("#freeze", "change")
    n_drawn = page.evaluate("window.plots.concept.u.data[0].length")
    n0 = page.evaluate("window.tune.samples")
    _wait(page, f"window.tune.samples >= {n0 + 10}")
    page.wait_for_timeout(200)
    assert page.evaluate("window.plots.concept.u.data[0].length") == n_drawn  # frozen view
    assert page.evaluate("window.plots.concept.data[0].length") > n_drawn  # data still kept
    csv = page.evaluate("window.tune.csv()")["concept"].splitlines()
    assert csv[0].startswith("t (s),measured (m/s),setpoint (m/s)")
    rows = [list(map(float, r.split(",")[:1])) for r in csv[1:]]
    lo, hi = page.evaluate(
        "[window.plots.concept.u.scales.x.min, window.plots.concept.u.scales.x.max]"
    )
    assert len(rows) > 10 and all(lo <= r[0] <= hi for r in rows)  # exactly the visible window
    with page.expect_download() as download:
        page.click("#export-csv")
    assert download.value.suggested_filename.startswith(
        "tune_"
    ) and download.value.suggested_filename.endswith(".csv")
    png = page.evaluate("window.plots.concept.png()")
    assert png.startswith("data:image/png;base64,") and len(png) > 2000
    with page.expect_download() as download:
        page.click("#export-png")
    assert download.value.suggested_filename.endswith(".png")
    page.uncheck("#freeze")
    page.dispatch_event("#freeze", "change")
    _wait(page, f"window.plots.concept.u.data[0].length > {n_drawn}")


def test_every_pid_parameter_is_editable(page: Any, server: Any) -> None:
    _fill(page, "#tau_d", "0.05")
    _fill(page, "#kff", "0.5")
    _fill(page, "#bias", "0.1")
    page.select_option("#anti_windup", "back_calculation")
    page.dispatch_event("#anti_windup", "input")
    page.click("#apply-gains")
    _wait(page, "window.tune.state.params.pid.anti_windup === 'back_calculation'")
    params = server.session.live.params["pid"]
    assert params["tau_d"] == 0.05 and params["kff"] == 0.5 and params["bias"] == 0.1
    pid = server.session.live.controller("pid")
    assert pid.config.anti_windup == "back_calculation" and pid.config.kff == 0.5  # type: ignore[attr-defined]
    for field in ("kp", "ki", "kd", "output_min", "output_max", "rate_limit", "tau_d",
                  "anti_windup", "tracking_gain", "kff", "bias", "direction"):  # fmt: skip
        assert page.locator(f"#{field}").count() == 1, f"no field for {field}"
    _fill(page, "#kff", "0")  # back to the defaults for the tests that follow
    _fill(page, "#bias", "0")
    _fill(page, "#tau_d", "0")
    page.select_option("#anti_windup", "clamping")
    page.dispatch_event("#anti_windup", "input")
    page.click("#apply-gains")
    _wait(page, "window.tune.state.params.pid.anti_windup === 'clamping'")


def test_changing_kp_and_setpoint_steers_the_rollout(page: Any, server: Any) -> None:
    session = server.session
    _fill(page, "#kp", "0.5")
    _fill(page, "#ki", "60")
    page.click("#apply-gains")
    _wait(page, "document.getElementById('message').textContent.startsWith('ok: gains')")
    _wait(page, "window.tune.state.params.pid.kp === 0.5")
    assert session.live.params["pid"]["kp"] == 0.5
    pid = session.live.controller("pid")
    _wait(page, "window.tune.last.setpoint !== null")
    assert pid.config.kp == 0.5 and pid.config.ki == 60.0  # type: ignore[attr-defined]

    _fill(page, "#setpoint", "0.25")
    page.click("#apply-setpoint")
    # the arm speeds up to the new setpoint: alpha = log3(0.25 / 0.1) ~ 0.83
    s = _wait(
        page,
        "(() => { const s = window.tune.last; return s.setpoint === 0.25 && "
        "Math.abs(s.measurement - 0.25) < 0.02 && s.output > 0.6 ? s : null; })()",
    )
    assert s["measurement"] == pytest.approx(0.25, abs=0.02)
    assert s["output"] > 0.6  # the controller raised alpha from ~0.37 (0.15 m/s)


def test_step_response_experiment_reports_figures(page: Any, server: Any) -> None:
    _fill(page, "#step-from", "0.08")
    _fill(page, "#step-to", "0.15")
    page.click("#run-step")
    _wait(page, "window.tune.stepResult !== null")
    result = page.evaluate("window.tune.stepResult")
    rise, overshoot, settling = (
        page.inner_text(f"#step-{k}") for k in ("rise", "overshoot", "settling")
    )
    assert rise.endswith(" s") and overshoot.endswith(" %") and settling.endswith(" s (2 %)")
    assert page.inner_text("#step-start").startswith("yes")  # stepped from a settled start
    for cell in ("step-sse", "step-iae", "step-itae"):
        assert page.inner_text(f"#{cell}") not in ("-", "n/a")
    assert float(rise.split()[0]) == pytest.approx(result["rise_time_s"], rel=1e-2)
    assert 0 < result["rise_time_s"] < 1.0 and result["overshoot_pct"] >= 0
    # the hold mode: the arm keeps cruising (no success to wait for), the step came from a
    # settled start and the loop settled in the 2 % band
    assert math.isfinite(result["settling_time_s"]) and result["hold"] is True
    assert result["start_settled"] is True and result["acceptable"] is True
    assert result["settle_band_pct"] == 2.0
    assert result["params"]["kp"] == 0.5 and result["from"] == 0.08 and result["to"] == 0.15
    # the page shows what the server measured and wrote
    import json

    saved = json.loads((server.session.config.out_dir / "last_step_test.json").read_text())
    assert saved["rise_time_s"] == pytest.approx(result["rise_time_s"])
    # the step test's own plot: round ticks too (its ~16 s trace once got 0, 3, 5, 8, 10, 13)
    page.wait_for_timeout(300)
    ticks = page.evaluate("({x: window.stepPlot.ticks.x, y: window.stepPlot.ticks.y})")
    _assert_round_ticks(ticks["x"], "step plot x")
    _assert_round_ticks(ticks["y"], "step plot y")


def test_save_and_load_gains(page: Any, server: Any) -> None:
    import controllers

    out_dir = server.session.config.out_dir
    _fill(page, "#save-name", "my_gains")
    page.click("#save")
    _wait(page, "document.getElementById('message').textContent.includes('saved my_gains.yaml')")
    saved = controllers.load(out_dir / "my_gains.yaml")  # what `embodied eval/deploy` read
    assert saved.config.kp == 0.5 and saved.config.ki == 60.0  # type: ignore[attr-defined]
    assert controllers.read_meta(out_dir / "my_gains.yaml")["setpoint"] == 0.25

    _fill(page, "#kp", "3")
    page.click("#apply-gains")
    _wait(page, "window.tune.state.params.pid.kp === 3")
    _wait(
        page,
        "[...document.querySelectorAll('#load-name option')].some(o => o.value === 'my_gains.yaml')",
    )
    page.select_option("#load-name", "my_gains.yaml")
    page.click("#load")
    _wait(page, "window.tune.state.params.pid.kp === 0.5")
    assert page.input_value("#kp") == "0.5"
    assert server.session.live.controller("pid").config.kp == 0.5  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("field", "value", "expect"),
    [
        ("#kp", "-1", "kp=-1"),
        ("#kp", "abc", "must be a number"),
        ("#ki", "nan", "finite"),
    ],
)
def test_bad_gains_are_refused_with_a_visible_message(
    page: Any, server: Any, field: str, value: str, expect: str
) -> None:
    pid = server.session.live.controller("pid")
    before = dict(server.session.live.params["pid"]), pid.config
    _fill(page, field, value)
    page.click("#apply-gains")
    _wait(
        page,
        f"document.getElementById('message').classList.contains('error') && "
        f"document.getElementById('message').textContent.includes({expect!r})",
    )
    text, cls = _message(page)
    assert "refused" in text and "error" in cls and page.is_visible("#message")
    assert (dict(server.session.live.params["pid"]), pid.config) == before  # never reached it
    _fill(page, field, str(before[0][field[1:]]))


def test_out_of_range_setpoint_is_refused(page: Any, server: Any) -> None:
    _fill(page, "#setpoint", "5")
    page.click("#apply-setpoint")
    _wait(page, "document.getElementById('message').textContent.includes('setpoint 5 outside')")
    assert server.session.setpoint == 0.25
    _fill(page, "#setpoint", "0.15")
    page.click("#apply-setpoint")
    _wait(page, "window.tune.last.setpoint === 0.15")


def test_autotune_proposes_gains_and_screenshot(
    page: Any, server: Any, artifacts_dir: Path
) -> None:
    _fill(page, "#kp", "1")
    _fill(page, "#ki", "20")
    page.click("#apply-gains")
    _wait(page, "window.tune.state.params.pid.ki === 20")
    _fill(page, "#at-budget", "5")
    page.click("#autotune")
    _wait(page, "window.tune.autotune !== null", timeout_ms=90_000)
    res = page.evaluate("window.tune.autotune")
    assert len(res["candidates"]) == 5
    # the proposal is an acceptable loop (settled within the overshoot limit), and better than
    # the start gains whenever those were acceptable too
    chosen = [
        c
        for c in res["candidates"]
        if (c["kp"], c["ki"]) == (res["proposal"]["kp"], res["proposal"]["ki"])
    ]
    assert chosen and chosen[0]["acceptable"]
    assert res["baseline_score"] is None or res["score"] <= res["baseline_score"]
    assert page.locator("#at-table tbody tr").count() == 5
    assert "proposal: Kp=" in page.inner_text("#at-result")
    page.click("#apply-proposal")
    _wait(page, f"window.tune.state.params.pid.ki === {res['proposal']['ki']}")
    # a fresh step test with the proposal, so the screenshot shows tuned figures
    page.click("#run-step")
    _wait(page, f"window.tune.stepResult.params.ki === {res['proposal']['ki']}")
    page.wait_for_timeout(1500)  # let the live plots refill
    shot = artifacts_dir / "tune_page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
