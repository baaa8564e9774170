"""Figures of steered rollouts: concept vs setpoint and the command alpha_t over time."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from embodied.apps.plotting import plt, save_figure
from embodied.errors import ConfigError
from embodied.loop import Episode


def plot_tracking(
    runs: Mapping[str, Episode],
    path: str | os.PathLike[str],
    *,
    knob: str = "alpha",
    title: str = "",
    units: str = "m/s",
    concept: str = "ee_speed",
) -> Path:
    """Save a two-panel PNG: measured concept with setpoint (top), knob value (bottom).

    Args:
        runs: Label -> episode (e.g. ``{"no control": ep0, "PID": ep1}``).
        path: Output file (``.png``), written atomically.
        knob: Knob plotted in the lower panel (first element for vector knobs).
        title: Figure title.
        units: Concept units for the axis label.
        concept: Concept name for the axis label.
    """
    if not runs:
        raise ConfigError("plot_tracking needs at least one episode")
    fig, (ax_c, ax_k) = plt.subplots(2, 1, figsize=(7.5, 5.5), sharex=True)
    setpoint_drawn = False
    for label, ep in runs.items():
        rate = float(ep.meta.get("control_rate_hz") or 1.0)
        t = np.arange(len(ep)) / rate
        (line,) = ax_c.plot(t, ep.measurements, label=label)
        if not setpoint_drawn and np.isfinite(ep.setpoints).any():
            ax_c.plot(t, ep.setpoints, "k--", lw=1.2, label="setpoint")
            setpoint_drawn = True
        if knob in ep.knobs:
            ax_k.plot(t, ep.knobs[knob][:, 0], color=line.get_color(), label=label)
        if ep.success_step >= 0:
            ax_c.axvline(ep.success_step / rate, color=line.get_color(), ls=":", lw=0.8)
    ax_c.set_ylabel(f"{concept} [{units}]")
    ax_k.set_ylabel(knob)
    ax_k.set_xlabel("time [s]")
    ax_c.legend(loc="best", fontsize=8)
    ax_c.grid(alpha=0.3)
    ax_k.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    save_figure(fig, out)
    return out
