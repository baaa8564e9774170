"""Activation steering of VLAs: extract directions, run experiments.

`embodied lab steer experiment` compares open- and closed-loop steering; without
`--model` it first trains the tiny VLA on the built-in arm task, with `--model
openvla/openvla-7b --env libero:...` it steers the real model on a GPU. The
tiny VLA alone is trained by `embodied train vla`. `embodied lab steer reference` runs the
same controllers on the scripted speed-knob plant (no VLA): no control vs fixed alpha vs PID
(vs RL).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import typer

# Light modules only (`embodied lab steer --help` does not import torch); each command imports the
# experiment code when it runs.
from embodied.apps.cli._config_options import Opt, config_options
from embodied.apps.lab.config_steer import (
    DialSettings,
    ExperimentSettings,
    SteerExperimentConfig,
)

steer_app = typer.Typer(help=__doc__, no_args_is_help=True)

_DIRECTION = (
    Opt("env_id", flag="--env"),
    Opt("dataset", type=Path),
    "image_key",
    "kind",
    "layer",
    "positions",
    "neurons",
    "unnorm_key",
    "layout",
    "jitter",
)
"""Options of :class:`SteerExperimentConfig` that ``extract`` and ``experiment`` share."""


@steer_app.command("extract")
@config_options(
    SteerExperimentConfig,
    *_DIRECTION,
    Opt("extraction_episodes", flag="--demonstration-episodes"),
)
def extract_cmd(
    model: Path = typer.Option(..., "--model", help="OpenVLA checkpoint folder or hub id."),
    out: Path = typer.Option(..., "--out", help="Output stem (writes .safetensors + .json)."),
    *,
    config: dict[str, Any],
) -> None:
    """Difference-of-means speed direction (fast vs slow demonstration steps) or neuron cluster."""
    import torch

    from embodied.apps.cli._common import log
    from embodied.apps.lab.steer import extract_speed_intervention
    from embodied.apps.training.training_vla import steer_env
    from policies.openvla.loading_openvla import load_pretrained

    torch.set_num_threads(1)
    cfg = SteerExperimentConfig(**config)
    m, proc = load_pretrained(str(model))
    if cfg.dataset is not None:
        inter = extract_speed_intervention(m, proc, cfg, log=log)
    else:
        env, reset, targets = steer_env(cfg.env_id, m.config.image_size, cfg.layout, cfg.jitter)
        inter = extract_speed_intervention(m, proc, cfg, env, reset, targets, log=log)
    path = inter.save(out)
    print(json.dumps({"path": str(path), "layer": inter.layer, "meta": inter.meta}))


@steer_app.command("experiment")
@config_options(
    ExperimentSettings,
    "setpoint",
    "episodes",
    "seed",
    "tuning_seed",
    "alpha_limit",
    "sweep_episodes",
    "sweep_alphas",
    "haeon_coefs",
    "haeon_words",
    "haeon_neurons",
    "haeon_top_k",
    "rl_timesteps",
    "rl_seed",
    "rl_train_seed",
    Opt("rl_controller", type=Path),
    "rl_observe_setpoint",
    "rl_setpoint_range",
    "rl_error_weight",
    "rl_log_std_init",
    "setpoints",
    "setpoint_change_s",
    "pid_fit",
    "pid_feedforward",
    "pid_reference_tau_s",
    "min_success_ratio",
    "steady_transient_s",
    "expert_reference",
    "release_outside_concept",
    "concept",
    into="settings",
)
@config_options(
    SteerExperimentConfig,
    *_DIRECTION,
    "model",
    "preset",
    Opt("direction", type=Path),
    "llm_layers",
    "demonstration_episodes",
    "train_steps",
    "bc_sampling",
    "retrain",
    "image_size",
    "pid_kp",
    "pid_ki",
    "speed_labels",
    "speed_range",
    "unnamed_fraction",
    "speed_embedding",
    "action_bounds",
    "method",
    "site",
    "instruction_suffix",
    "height_range",
    "height_speed",
    "height_start_range",
    "height_descents",
)
def experiment_cmd(
    out: Path = typer.Option(Path("runs/ctrl_steer"), "--out", help="Output folder."),
    *,
    config: dict[str, Any],
    settings: dict[str, Any],
) -> None:
    """None vs fixed alpha* vs Häon et al. vs PID vs RL, tuned on seeds disjoint from evaluation."""
    import torch

    from embodied.apps.cli._common import log
    from embodied.apps.lab.steer import steer_experiment
    from embodied.apps.lab.steer_report import markdown_table

    torch.set_num_threads(1)
    # one --concept: what the demonstrations vary is what the controllers track
    exp = ExperimentSettings(**settings)
    cfg = SteerExperimentConfig(**{**config, "concept": exp.concept})
    report = steer_experiment(out, cfg, exp, log)
    print(markdown_table(report))
    print(
        f"wrote {out / 'results.json'}, {out / 'results.md'}, "
        f"{out / (exp.concept + '_alpha.png')}, "
        f"{out / 'success_vs_rmse.png'}"
    )


@steer_app.command("dial")
@config_options(DialSettings, *(f.name for f in dataclasses.fields(DialSettings)), into="dial")
@config_options(
    SteerExperimentConfig,
    Opt("env_id", flag="--env"),
    Opt("speed_labels", default="none"),
    "speed_range",
    "unnamed_fraction",
    Opt("layout", default="random"),
    "jitter",
    "layer",
    "positions",
    "site",
    "llm_layers",
    "train_steps",
    "bc_sampling",
    "speed_embedding",
    "action_bounds",
    "image_size",
    "retrain",
    "instruction_suffix",
    "concept",
    "height_range",
    "height_speed",
    "height_start_range",
    "height_descents",
)
def dial_cmd(
    out: Path = typer.Option(Path("runs/steer_dial"), "--out", help="Output folder."),
    *,
    config: dict[str, Any],
    dial: dict[str, Any],
) -> None:
    """Is steering a dial? Train the tiny VLA on graded-speed (or, with --concept height,
    graded-height) demonstrations, extract the concept's direction three ways and measure each
    one's dose-response (the concept and success against alpha) on tuning seeds:
    OUT/dial.{json,md,png}."""
    import torch

    from embodied.apps.cli._common import log
    from embodied.apps.lab.steer import dial_experiment
    from embodied.errors import ConfigError

    torch.set_num_threads(1)
    try:
        cfg, settings = SteerExperimentConfig(**config), DialSettings(**dial)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc
    report = dial_experiment(out, cfg, settings, log)
    print((out / "dial.md").read_text(encoding="utf-8"))
    print(f"dial methods: {report['dial_methods'] or 'none'}; wrote {out / 'dial.png'}")


@steer_app.command("rescore")
def rescore_cmd(
    run: Path = typer.Argument(..., help="Folder of a finished `lab steer experiment`."),
    out: Path | None = typer.Option(None, "--out", help="Output folder (default RUN/rescored)."),
    steady_transient_s: float = typer.Option(
        ExperimentSettings.steady_transient_s,
        "--steady-transient-s",
        help="Time left out after the start and after each setpoint change (s).",
    ),
    expert_reference: bool = typer.Option(
        True,
        "--expert-reference/--no-expert-reference",
        help="Add the expert-at-setpoint rows (rolls the scripted expert out on the run's "
        "evaluation seeds) when the run has none.",
    ),
) -> None:
    """Re-summarise a finished experiment from its saved traces with the steady-state RMSE
    (and the expert-at-setpoint reference rows), into a new folder; the run is not touched."""
    from embodied.apps.cli._common import log
    from embodied.apps.lab.steer import rescore
    from embodied.apps.lab.steer_report import markdown_table, write_report
    from embodied.apps.training.training_vla import steer_env
    from embodied.errors import ConfigError
    from embodied.io import read_json_file

    if not steady_transient_s >= 0:
        raise ConfigError(
            f"--steady-transient-s {steady_transient_s} is negative", fix="use e.g. 0.5 (s)"
        )
    report = read_json_file(run / "results.json")
    target = out or run / "rescored"
    if target.resolve() == run.resolve():
        raise ConfigError(f"--out {target} is the run itself", fix="name a new folder")
    env, _, _ = steer_env(
        report.get("env_id", "mujoco:arm_reach"), 32, report.get("layout", "fixed"),
        report.get("jitter_m") or 0.0,
    )  # fmt: skip
    try:
        new = rescore(
            report, env.control_rate_hz, steady_transient_s, env if expert_reference else None, log
        )
    finally:
        env.close()
    write_report(new, target, env.control_rate_hz)
    print(markdown_table(new))
    print(f"wrote {target / 'results.json'} and {target / 'results.md'}")


@steer_app.command("reference")
def reference_cmd(
    out: Path = typer.Option(Path("runs/ctrl_reference"), "--out", help="Output folder."),
    rl: Path | None = typer.Option(None, "--rl", help="Folder of a trained RL controller."),
    train_rl: int = typer.Option(0, "--train-rl", help="Train an RL controller for N steps first."),
    seeds: int = typer.Option(5, "--seeds", help="Episodes per controller."),
) -> None:
    """Closed loop on the scripted speed-knob plant: no control vs fixed alpha vs PID (vs RL)."""
    from embodied.apps.lab import controllers as reference_comparison

    table = reference_comparison.run(out, rl_path=rl, train_rl_steps=train_rl, seeds=seeds)
    print(reference_comparison.format_table(table))
    print(f"wrote {out / 'table.json'} and {out / 'tracking.png'}")


def register(app: typer.Typer) -> None:
    """Add the ``steer`` command group to ``app``."""
    app.add_typer(steer_app, name="steer")
