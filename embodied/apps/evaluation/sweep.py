"""Parameter sweeps of closed-loop steering: controller gains x setpoints x policy options.

A sweep is an evaluation whose variant axis is a grid: every grid point becomes an
:class:`~embodied.apps.evaluation.EvalVariant` whose steering is
``Steering(make_concept(concept), controllers.make(controller, **params), knob, setpoint)``,
laid out by :func:`~embodied.apps.evaluation.build_grid` (same seeds for every point: paired
comparison) and run through :func:`embodied.loop.rollout` on any evaluation backend
(``local``, ``inline``, ``ray``), so dead workers are rerun exactly as in ``embodied eval``.

Grid axes (``--grid NAME=V1,V2,...``):

* ``setpoint``: the concept setpoint (concept units, e.g. m/s for ``ee_speed``);
* ``policy.<arg>``: a policy factory argument (e.g. ``policy.base_speed``);
* ``concept.<arg>``: a concept argument (e.g. ``concept.filter_tau_s``);
* anything else: a controller parameter (``kp``, ``ki``, ``kd``, ...).

Per point the table reports success (Wilson 95% interval), the tracking RMSE of the concept
after ``settle_s`` seconds, the mean measured concept value over the same window and the
mean episode length. ``run_sweep`` writes ``sweep.json``, ``sweep.md`` and ``sweep.png``.

CLI::

    embodied sweep --env mujoco:arm_reach --policy expert_speed_knob --controller pid \\
        --grid kp=1,2,4 --grid setpoint=0.08,0.12 --set ki=50 --backend ray --out DIR
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import controllers
from embodied.apps.evaluation.backends import BACKENDS, EventCallback
from embodied.apps.evaluation.configuration_evaluation import (
    EpisodeSpec,
    EvalConfig,
    EvalVariant,
    PolicyLoader,
)
from embodied.apps.evaluation.grid import build_grid
from embodied.apps.evaluation.report import _finite, library_versions
from embodied.apps.evaluation.stats import wilson_interval
from embodied.apps.evaluation.worker import EpisodeRecord, EpisodeRunner, record_fields
from embodied.apps.plotting import plt, save_figure
from embodied.concepts import make_concept
from embodied.config import Rule, checked, validate
from embodied.contracts import Env, Policy
from embodied.errors import CompatibilityError, ConfigError
from embodied.io import write_json, write_text
from embodied.loop import Steering


@dataclass(frozen=True)
class KnobClip:
    """``to_knob`` that clips the controller command into the knob's bounds."""

    low: float
    high: float

    def __call__(self, command: float) -> float:
        return float(min(max(float(command), self.low), self.high))


@dataclass(frozen=True)
class SteeringSpec:
    """A picklable steering factory (built in the worker for every episode).

    Args:
        concept: Concept name (``ee_speed``, ``ee_height``, ``smoothness``).
        concept_kwargs: Concept arguments.
        controller: Controller name (``pid``, ``fixed``, ...).
        controller_params: Controller parameters.
        knob: Policy knob the command drives.
        setpoint: Concept setpoint (concept units).
    """

    concept: str
    concept_kwargs: Mapping[str, Any]
    controller: str
    controller_params: Mapping[str, Any]
    knob: str
    setpoint: float

    def __call__(self, env: Env, policy: Policy) -> Steering:
        knobs: Mapping[str, Any] = getattr(policy, "knobs", dict)()
        to_knob = None
        if self.knob in knobs and len(knobs[self.knob].low) == 1:
            to_knob = KnobClip(float(knobs[self.knob].low[0]), float(knobs[self.knob].high[0]))
        return Steering(
            concept=make_concept(self.concept, **dict(self.concept_kwargs)),
            controller=controllers.make(self.controller, **dict(self.controller_params)),
            knob=self.knob,
            setpoint=float(self.setpoint),
            to_knob=to_knob,
        )


def parse_axis(text: str) -> tuple[str, tuple[Any, ...]]:
    """``"kp=1,2,4"`` -> ``("kp", (1, 2, 4))`` (numbers parsed, other values kept as text)."""
    name, sep, values = text.partition("=")
    name = name.strip()
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not name or not items:
        raise ConfigError(f"grid axis {text!r} must be NAME=V1,V2,...", fix="e.g. --grid kp=1,2,4")
    out: list[Any] = []
    for v in items:
        try:
            out.append(int(v) if v.lstrip("-").isdigit() else float(v))
        except ValueError:
            out.append(v)
    return name, tuple(out)


@dataclass(frozen=True)
class SweepConfig:
    """A parameter sweep.

    Args:
        env: Env id of the task.
        policy: Policy name or checkpoint folder (must be Steerable with ``knob``).
        grid: Axis name -> values (see the module docstring for the axis names).
        controller: Controller name.
        controller_params: Controller parameters shared by every point.
        concept: Concept name.
        concept_kwargs: Concept arguments shared by every point.
        knob: Knob name.
        setpoint: Setpoint when ``setpoint`` is not a grid axis (concept units).
        policy_kwargs: Policy arguments shared by every point.
        env_kwargs: Arguments of ``sim.make``.
        episodes: Episodes per point (seeds ``seed .. seed + episodes - 1``).
        seed: Base seed.
        max_steps: Step limit per episode (None: the env's).
        settle_s: Seconds excluded from the start of the tracking error (transient).
        workers: Worker processes / actors (0: inline).
        backend: ``local``, ``inline`` or ``ray``.
        address: Ray cluster address (``ray`` backend only).
        max_retries: Reruns of an episode whose worker died.
        out: Output folder for ``sweep.json``, ``sweep.md`` and ``sweep.png`` (None: none).

    Derived:
        points: Every grid point, as ``{axis: value}`` in grid order (first axis slowest).
    """

    env: str
    policy: str
    grid: Mapping[str, Sequence[Any]]
    controller: str = "pid"
    controller_params: Mapping[str, Any] = field(default_factory=dict)
    concept: str = "ee_speed"
    concept_kwargs: Mapping[str, Any] = field(default_factory=dict)
    knob: str = "alpha"
    setpoint: float | None = None
    policy_kwargs: Mapping[str, Any] = field(default_factory=dict)
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    episodes: int = checked(2, ge=1, fix="use e.g. --episodes 2")
    seed: int = 0
    max_steps: int | None = None
    settle_s: float = checked(0.0, ge=0, fix="use a time >= 0 s, e.g. 1.0")
    workers: int = checked(1, ge=0, fix="use e.g. --workers 2 (0 runs inline)")
    backend: str = "local"
    address: str | None = None
    max_retries: int = checked(2, ge=0, fix="use e.g. 2 (0: never rerun)")
    out: str | Path | None = None
    points: tuple[dict[str, Any], ...] = field(init=False)

    config_name: ClassVar[str] = "sweep"
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule("grid", lambda c: bool(c.grid), "needs at least one axis", "e.g. --grid kp=1,2,4"),
        Rule(
            "grid",
            lambda c: all(v and len(set(map(repr, v))) == len(v) for v in c.grid.values()),
            lambda c: (
                "needs distinct values on every axis, not "
                f"{next(n for n, v in c.grid.items() if not v or len(set(map(repr, v))) != len(v))!r}"
            ),
            "e.g. --grid kp=1,2,4",
        ),
        Rule(
            "grid",
            lambda c: not any(ch in name for name in c.grid for ch in "/,="),
            "has an axis name with '/', ',' or '='",
            "name the axes after the parameters they set, e.g. kp",
        ),
        Rule(
            "grid",
            lambda c: all(isinstance(v, int | float) for v in c.grid.get("setpoint", ())),
            "has setpoint values that are not numbers: setpoint values must be numbers "
            "(concept units)",
            "e.g. --grid setpoint=0.08,0.12",
        ),
        Rule(
            "setpoint",
            lambda c: "setpoint" in c.grid or c.setpoint is not None,
            "and no grid axis 'setpoint': the sweep has no setpoint",
            "e.g. --setpoint 0.12 or --grid setpoint=0.08,0.12",
        ),
        Rule(
            "address",
            lambda c: c.address is None or c.backend == "ray",
            "is only used by the ray backend, not {backend!r}",
            "add --backend ray or drop --address",
        ),
    )

    def __post_init__(self) -> None:
        grid = {str(k): tuple(v) for k, v in dict(self.grid).items()}
        object.__setattr__(self, "grid", grid)
        validate(self)
        names = list(grid)
        pts = tuple(
            dict(zip(names, combo, strict=True)) for combo in itertools.product(*grid.values())
        )
        object.__setattr__(self, "points", pts)
        if self.out is not None:
            object.__setattr__(self, "out", Path(self.out))

    def variant(self, point: Mapping[str, Any]) -> EvalVariant:
        """The evaluation variant of one grid point."""
        ctrl, conc, pol = dict(self.controller_params), dict(self.concept_kwargs), {}
        setpoint = self.setpoint
        for name, value in point.items():
            if name == "setpoint":
                setpoint = float(value)
            elif name.startswith("policy."):
                pol[name[7:]] = value
            elif name.startswith("concept."):
                conc[name[8:]] = value
            else:
                ctrl[name] = value
        assert setpoint is not None
        spec = SteeringSpec(self.concept, conc, self.controller, ctrl, self.knob, setpoint)
        label = ",".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items()
        )
        return EvalVariant(name=label, steering=spec, policy_kwargs=pol)

    def eval_config(self) -> EvalConfig:
        """The equivalent evaluation (grid = env x episodes x points)."""
        family = self.env.split(":", 1)[0]
        return EvalConfig(
            envs=(self.env,),
            episodes=self.episodes,
            workers=self.workers,
            seed=self.seed,
            env_kwargs={family: dict(self.env_kwargs)},
            max_steps=self.max_steps,
            variants=tuple(self.variant(p) for p in self.points),
            backend=self.backend,
            max_retries=self.max_retries,
            preflight=False,
        )

    def describe(self) -> dict[str, Any]:
        """JSON form for result files."""
        return {
            "env": self.env,
            "policy": self.policy,
            "grid": {k: list(v) for k, v in self.grid.items()},
            "controller": self.controller,
            "controller_params": dict(self.controller_params),
            "concept": self.concept,
            "concept_kwargs": dict(self.concept_kwargs),
            "knob": self.knob,
            "setpoint": self.setpoint,
            "policy_kwargs": dict(self.policy_kwargs),
            "env_kwargs": {k: repr(v) for k, v in dict(self.env_kwargs).items()},
            "episodes": self.episodes,
            "seed": self.seed,
            "max_steps": self.max_steps,
            "settle_s": self.settle_s,
            "workers": self.workers,
            "backend": self.backend,
            "address": self.address,
        }


@dataclass
class SweepRecord(EpisodeRecord):
    """An :class:`EpisodeRecord` with the tracking figures of the episode.

    Attributes:
        tracking_rmse: RMS of (concept - setpoint) after ``settle_s`` (concept units).
        mean_measurement: Mean concept value over the same window (concept units).
        mean_knob: Mean knob value over the same window.
    """

    tracking_rmse: float = float("nan")
    mean_measurement: float = float("nan")
    mean_knob: float = float("nan")


class SweepRunner(EpisodeRunner):
    """An :class:`EpisodeRunner` that also measures how well the concept tracked its setpoint."""

    settle_s: float = 0.0

    def run(self, spec: EpisodeSpec) -> SweepRecord:
        """Run one grid episode through :func:`embodied.loop.rollout` and score the tracking."""
        t0 = time.perf_counter()
        env = self.env(spec.env_id)
        ep, steering = self.rollout_spec(spec, env, stop_on_success=False)
        skip = round(self.settle_s * env.control_rate_hz)
        err = ep.measurements[skip:] - ep.setpoints[skip:]
        ok = np.isfinite(err)
        knob = ep.knobs.get(steering.knob if steering else "", np.zeros((0, 1)))[skip:]
        return SweepRecord(
            **record_fields(spec, ep, t0),
            tracking_rmse=float(np.sqrt(np.mean(err[ok] ** 2))) if ok.any() else math.nan,
            mean_measurement=float(np.mean(ep.measurements[skip:][ok])) if ok.any() else math.nan,
            mean_knob=float(np.mean(knob[:, 0])) if knob.size else math.nan,
        )


@dataclass
class SweepResult:
    """A finished sweep: one row per grid point plus every episode."""

    config: dict[str, Any]
    rows: list[dict[str, Any]]
    episodes: list[SweepRecord]
    versions: dict[str, str | None]
    wall_s: float
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (NaN -> null)."""
        eps = [e.to_dict() for e in self.episodes]
        return _finite(  # type: ignore[no-any-return]
            {
                "format": "embodied-sweep/1",
                "config": self.config,
                "versions": self.versions,
                "rows": self.rows,
                "episodes": eps,
                "wall_s": self.wall_s,
                "files": self.files,
            }
        )

    def markdown(self) -> str:
        """The table as markdown."""
        axes = list(self.config["grid"])
        unit = {"ee_speed": "m/s", "ee_height": "m"}.get(self.config["concept"], "")
        u = f" ({unit})" if unit else ""
        lines = [
            "# Sweep results",
            "",
            f"Env `{self.config['env']}`, policy `{self.config['policy']}`, controller "
            f"`{self.config['controller']}` {self.config['controller_params']}, concept "
            f"`{self.config['concept']}` -> knob `{self.config['knob']}`; "
            f"{self.config['episodes']} episode(s) per point, backend `{self.config['backend']}`"
            f" with {self.config['workers']} worker(s), {self.wall_s:.1f} s; "
            f"{sum(r.attempts > 1 for r in self.episodes)} episode(s) rerun after a worker died.",
            "",
            "| " + " | ".join(axes) + f" | success | 95% CI | tracking RMSE{u} | "
            f"mean {self.config['concept']}{u} | mean knob | mean steps | errors |",
            "|" + "---:|" * (len(axes) + 7),
        ]
        for r in self.rows:
            cells = [str(r["point"][a]) for a in axes]
            cells += [
                f"{r['successes']}/{r['n']}",
                f"[{100 * r['ci_low']:.0f}%, {100 * r['ci_high']:.0f}%]",
                _fmt(r["tracking_rmse"]),
                _fmt(r["mean_measurement"]),
                _fmt(r["mean_knob"], 3),
                f"{r['mean_steps']:.1f}",
                str(r["errors"]),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "## Versions", ""] + [f"- {k}: {v}" for k, v in self.versions.items()]
        return "\n".join(lines) + "\n"


def _fmt(x: float, digits: int = 4) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _nanmean(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def summarize_sweep(config: SweepConfig, records: Sequence[SweepRecord]) -> list[dict[str, Any]]:
    """One row per grid point (in grid order).

    An episode that could not be run counts in ``n`` as a failure (and in ``errors``), as in
    :func:`~embodied.apps.evaluation.harness.summarize`; the other means cover the episodes
    that ran.
    """
    rows = []
    for point in config.points:
        name = config.variant(point).name
        recs = [r for r in records if r.spec.variant == name]
        ok = [r for r in recs if r.error is None]
        wins = sum(r.success for r in ok)
        lo, hi = wilson_interval(wins, len(recs))
        rows.append(
            {
                "point": dict(point),
                "variant": name,
                "n": len(recs),
                "successes": wins,
                "success_rate": wins / len(recs) if recs else math.nan,
                "ci_low": lo,
                "ci_high": hi,
                "tracking_rmse": _nanmean([r.tracking_rmse for r in ok]),
                "mean_measurement": _nanmean([r.mean_measurement for r in ok]),
                "mean_knob": _nanmean([r.mean_knob for r in ok]),
                "mean_steps": float(np.mean([r.steps for r in ok])) if ok else math.nan,
                "errors": len(recs) - len(ok),
                "retried": sum(r.attempts > 1 for r in recs),
            }
        )
    return rows


def plot_sweep(result: SweepResult, path: Path) -> None:
    """Tracking RMSE and mean concept value against the first axis, one line per other combo."""
    axes_names = list(result.config["grid"])
    x_name, others = axes_names[0], axes_names[1:]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in result.rows:
        groups.setdefault(tuple(r["point"][o] for o in others), []).append(r)
    numeric = all(isinstance(r["point"][x_name], int | float) for r in result.rows)
    for key, rows in groups.items():
        xs = [r["point"][x_name] if numeric else str(r["point"][x_name]) for r in rows]
        label = ", ".join(f"{o}={v}" for o, v in zip(others, key, strict=True)) or None
        line = ax1.plot(xs, [r["tracking_rmse"] for r in rows], "o-", label=label)[0]
        ax2.plot(
            xs, [r["mean_measurement"] for r in rows], "o-", color=line.get_color(), label=label
        )
        if "setpoint" in others:
            sp = key[others.index("setpoint")]
            ax2.axhline(float(sp), color=line.get_color(), ls=":", lw=1)
    concept = result.config["concept"]
    ax1.set(xlabel=x_name, ylabel=f"tracking RMSE of {concept}", title="tracking error")
    ax2.set(xlabel=x_name, ylabel=f"mean {concept}", title="achieved (dotted: setpoint)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        if groups and next(iter(groups)) != ():
            ax.legend(fontsize=8)
    fig.suptitle(
        f"{result.config['env']} / {result.config['policy']} / {result.config['controller']}"
    )
    save_figure(fig, path)


def run_sweep(config: SweepConfig, on_event: EventCallback | None = None) -> SweepResult:
    """Run every grid point on the configured backend; write the table and plot if ``out``.

    Raises:
        ConfigError / UnknownNameError: bad axis, controller, concept, policy or env names.
        CompatibilityError: the policy has no knob ``config.knob`` (before any worker starts).
    """
    t0 = time.perf_counter()
    ecfg = config.eval_config()
    specs = build_grid(ecfg)
    loader = PolicyLoader(config.policy, dict(config.policy_kwargs))
    runner = SweepRunner.from_config(ecfg, loader)
    assert isinstance(runner, SweepRunner)
    runner.settle_s = config.settle_s
    try:  # preflight: build env, policy and steering of the first point here
        env = runner.env(specs[0].env_id)
        for variant in ecfg.variants[:1]:
            policy = runner.policy(env, variant)
            policy.check_compatible(env)
            steering = variant.steering(env, policy) if variant.steering else None
            if steering is not None and config.knob not in getattr(policy, "knobs", dict)():
                raise CompatibilityError(
                    f"policy {config.policy!r} has no knob {config.knob!r}",
                    fix="pick a Steerable policy (e.g. expert_speed_knob) or --knob NAME",
                )
    finally:
        runner.close()
    kwargs: dict[str, Any] = {
        "workers": config.workers,
        "max_retries": config.max_retries,
        "start_method": "forkserver",
    }
    name = config.backend if config.workers > 0 else "inline"
    if name == "ray":  # BACKENDS loads its plugin embodied.apps.evaluation.ray_backend
        kwargs["address"] = config.address
    backend = BACKENDS.make(name, **kwargs)
    results = backend.run(specs, runner, on_event=on_event)
    records = [
        r if isinstance(r, SweepRecord) else SweepRecord(**vars(r))
        for r in (results[s.index] for s in specs)
    ]
    result = SweepResult(
        config=config.describe(),
        rows=summarize_sweep(config, records),
        episodes=records,
        versions=library_versions(),
        wall_s=time.perf_counter() - t0,
    )
    if config.out is not None:
        out = Path(config.out)
        result.files = {"json": "sweep.json", "markdown": "sweep.md", "plot": "sweep.png"}
        plot_sweep(result, out / "sweep.png")
        write_json(out / "sweep.json", result.to_dict())
        write_text(out / "sweep.md", result.markdown())
    return result
