"""Tables and plots of the CTRL-STEER experiment (``results.md``, ``speed_alpha.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embodied.apps.plotting import plt, save_figure
from embodied.io import write_json, write_text


def markdown_table(report: dict[str, Any]) -> str:
    """The results table (and sweep) as markdown."""
    sp = report["settings"]["setpoint"]
    lines = [
        f"Target end-effector speed: {sp} m/s; {report['settings']['episodes']} episodes per row.",
        "",
        "| controller | success | RMSE (m/s) | mean speed (m/s) | overshoot (%) | settling (s) | settled |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['controller']} | {r['success_rate']:.2f} | {r['rmse']:.4f} | {r['mean_speed']:.3f} "
            f"| {r['overshoot_pct']:.1f} | {r['settling_time_s']:.2f} | {r['settled_fraction']:.2f} |"
        )
    if report.get("sweep"):
        lines += [
            "",
            "Fixed-alpha sweep (dose response):",
            "",
            "| alpha | success | mean speed (m/s) |",
            "|---|---|---|",
        ]
        lines += [
            f"| {r['alpha']:g} | {r['success_rate']:.2f} | {r['mean_speed']:.3f} |"
            for r in report["sweep"]
        ]
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], out: Path, rate_hz: float) -> None:
    """results.json, results.md and speed_alpha.png (first episode of each controller)."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", report)
    write_text(out / "results.md", markdown_table(report))
    traces = report["traces"]
    fig, axes = plt.subplots(
        2, len(traces), figsize=(3.2 * len(traces), 5.2), sharey="row", squeeze=False
    )
    sp = report["settings"]["setpoint"]
    for j, (label, eps) in enumerate(traces.items()):
        for i, ep in enumerate(eps[:3]):
            t = np.arange(len(ep["speed"])) / rate_hz
            style = {"alpha": 1.0 if i == 0 else 0.35, "lw": 1.4 if i == 0 else 0.9}
            axes[0, j].plot(t, ep["speed"], color="C0", **style)
            axes[1, j].plot(t, ep["alpha"], color="C3", **style)
        axes[0, j].axhline(sp, ls="--", color="k", lw=0.8)
        ok = report["rows"][j]["success_rate"]
        axes[0, j].set_title(f"{label}\nsuccess {ok:.2f}", fontsize=9)
        axes[1, j].set_xlabel("time (s)")
    axes[0, 0].set_ylabel("ee speed (m/s)")
    axes[1, 0].set_ylabel("alpha_t")
    fig.tight_layout()
    save_figure(fig, out / "speed_alpha.png")
