"""Tables and plots of the CTRL-STEER experiment (``results.md``, ``<concept>_alpha.png``,
``success_vs_rmse.png``), in the units of the concept the run tracked (speed: m/s, height: m)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from embodied.apps.lab.config_steer import CONCEPT_UNITS
from embodied.apps.plotting import plt, save_figure
from embodied.io import write_json, write_text


def _ci(lo_hi: Any, fmt: str) -> str:
    if not lo_hi or not all(math.isfinite(v) for v in lo_hi):
        return "n/a"
    return f"[{lo_hi[0]:{fmt}}, {lo_hi[1]:{fmt}}]"


def concept_of(report: dict[str, Any]) -> tuple[str, str]:
    """The concept a report tracked and its units (reports from before the height concept:
    speed)."""
    concept = str(report["settings"].get("concept", "speed"))
    return concept, CONCEPT_UNITS[concept]


def markdown_table(report: dict[str, Any]) -> str:
    """The results table (with Wilson / 95% intervals), seeds, budgets and the tuning sweeps."""
    s = report["settings"]
    concept, u = concept_of(report)
    targets = s.get("setpoints") or [s["setpoint"]]
    many = len(targets) > 1
    lines = [
        f"Target end-effector {concept}: {', '.join(f'{t:g}' for t in targets)} {u}; "
        f"{s['episodes']} evaluation episodes per row. Success: rate [Wilson 95%]; RMSE: mean "
        "[95% normal interval] over the whole episode, and steady-state (leaving out "
        f"{s.get('steady_transient_s', math.nan):g} s after the start and after each setpoint "
        "change) with its % of the setpoint.",
        "",
        f"| controller | success | success 95% CI | RMSE ({u}) | RMSE 95% CI "
        f"| steady RMSE ({u}) | steady 95% CI | steady % of setpoint | mean {concept} ({u}) "
        "| overshoot (%) | settling (s) | settled |" + (" scenes |" if many else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if many else ""),
    ]
    for r in report["rows"]:
        scenes = f" {r.get('distinct_scenes', '?')} |" if many else ""
        steady = r.get("rmse_steady", math.nan)
        sp = r.get("setpoint", s["setpoint"])
        lines.append(
            f"| {r['controller']} | {r['success_rate']:.2f} ({r.get('successes', '?')}/"
            f"{r['episodes']}) | {_ci(r.get('success_ci'), '.2f')} | {r['rmse']:.4f} "
            f"| {_ci(r.get('rmse_ci'), '.4f')} | {steady:.4f} "
            f"| {_ci(r.get('rmse_steady_ci'), '.4f')} | {100 * steady / sp:.1f} "
            f"| {r['mean_concept']:.3f} "
            f"| {r['overshoot_pct']:.1f} | {r['settling_time_s']:.2f} | {r['settled_fraction']:.2f} |"
            + scenes
        )
    if report.get("seeds"):
        lines += ["", "Seed ranges [first, end) (disjoint, checked in code):", ""]
        lines += [f"- {k}: [{v[0]}, {v[1]})" for k, v in report["seeds"].items()]
    if report.get("budgets"):
        lines += ["", "Budgets:", ""]
        lines += [f"- {k}: {v}" for k, v in report["budgets"].items()]
    for key, name, title in (
        ("sweep", "alpha", "Fixed-alpha sweep on the tuning seeds (alpha*, PID gains)"),
        ("haeon_sweep", "coef", "Häon constant sweep on the tuning seeds"),
    ):
        if report.get(key):
            lines += [
                "",
                f"{title}:",
                "",
                f"| {name} | success | mean {concept} ({u}) |",
                "|---|---|---|",
            ]
            lines += [
                f"| {r[name]:g} | {r['success_rate']:.2f} | {r['mean_concept']:.3f} |"
                for r in report[key]
            ]
    return "\n".join(lines) + "\n"


def plot_success_vs_rmse(report: dict[str, Any], path: Path) -> None:
    """One point per row: success rate (Wilson 95% bars) vs tracking RMSE (95% bars)."""
    u = concept_of(report)[1]
    fig, ax = plt.subplots(figsize=(5.2, 4.0))
    for i, r in enumerate(report["rows"]):
        x, y = r["rmse"], r["success_rate"]
        lo, hi = r.get("success_ci", [y, y])
        xlo, xhi = r.get("rmse_ci", [x, x])
        xerr = [[x - xlo], [xhi - x]] if all(map(math.isfinite, (xlo, xhi))) else None
        ax.errorbar(
            [x],
            [y],
            yerr=[[y - lo], [hi - y]],
            xerr=xerr,
            fmt="o",
            color=f"C{i}",
            capsize=3,
            label=r["controller"],
        )
    ax.set_xlabel(f"tracking RMSE ({u})")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    targets = report["settings"].get("setpoints") or [report["settings"]["setpoint"]]
    ax.set_title(
        f"setpoint {', '.join(f'{t:g}' for t in targets)} {u}, "
        f"{report['settings']['episodes']} episodes/row",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    save_figure(fig, path)


def write_report(report: dict[str, Any], out: Path, rate_hz: float) -> None:
    """results.json, results.md, <concept>_alpha.png (first episodes of each row) and
    success_vs_rmse.png."""
    concept, u = concept_of(report)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", report)
    write_text(out / "results.md", markdown_table(report))
    traces = report["traces"]
    ncols = min(6, len(traces))  # several setpoints give many rows: wrap them
    blocks = math.ceil(len(traces) / ncols)
    fig, axes = plt.subplots(
        2 * blocks, ncols, figsize=(3.2 * ncols, 5.2 * blocks), sharey="row", squeeze=False
    )
    for j, (label, eps) in enumerate(traces.items()):
        row = report["rows"][j]
        b, c = divmod(j, ncols)
        ax_v, ax_a = axes[2 * b, c], axes[2 * b + 1, c]
        for i, ep in enumerate(eps[:3]):
            t = np.arange(len(ep["measured"])) / rate_hz
            style = {"alpha": 1.0 if i == 0 else 0.35, "lw": 1.4 if i == 0 else 0.9}
            ax_v.plot(t, ep["measured"], color="C0", **style)
            ax_a.plot(t, ep["alpha"], color="C3", **style)
            if i == 0 and "setpoints" in ep:  # the (possibly changing) target of episode 0
                ax_v.plot(t, ep["setpoints"], ls="--", color="k", lw=0.8)
        if not eps or "setpoints" not in eps[0]:
            ax_v.axhline(
                row.get("setpoint", report["settings"]["setpoint"]), ls="--", color="k", lw=0.8
            )
        ax_v.set_title(f"{label}\nsuccess {row['success_rate']:.2f}", fontsize=9)
        ax_a.set_xlabel("time (s)")
        ax_v.set_ylabel(f"ee {concept} ({u})")
        ax_a.set_ylabel("alpha_t")
    for j in range(len(traces), blocks * ncols):
        b, c = divmod(j, ncols)
        axes[2 * b, c].set_visible(False)
        axes[2 * b + 1, c].set_visible(False)
    fig.tight_layout()
    save_figure(fig, out / f"{concept}_alpha.png")
    plot_success_vs_rmse(report, out / "success_vs_rmse.png")
