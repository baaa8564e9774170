"""Reward judges: record labelled demonstrations, run Demo2Reward, train RL on judge rewards.

Demo2Reward optimises a judge's instruction on a few labelled demonstrations; `reward rl`
trains SB3 PPO with the success reward from the simulator, the judge, or the judge with the
Demo2Reward instruction, and reports the simulator's success of each.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import typer

from controllers.rl.configuration_rl import merge_ppo_layers
from embodied.apps.cli._config_options import Opt, config_options, nest, nested_options
from embodied.apps.lab.judge_rl import BUDGETS as RL_BUDGETS
from embodied.apps.lab.judge_rl import JUDGE_RL_PPO, JudgeRLConfig
from embodied.apps.lab.judge_rl import results_markdown as judge_rl_markdown
from embodied.apps.lab.judge_rl import run_experiment as run_judge_rl
from embodied.apps.lab.reward import BUILTIN_TASKS, format_table, heldout_experiment
from embodied.apps.training.data_minijudge import record_episodes
from embodied.errors import ConfigError
from embodied.io import write_json
from embodied.rewards import BaseJudge, load_judge
from embodied.rewards.demo2reward import (
    PROPOSERS,
    Demo2RewardConfig,
    DemonstrationSet,
    Proposer,
    default_proposer,
    load_demonstrations,
    optimize_instruction,
    save_demonstrations,
    save_result,
)

reward_app = typer.Typer(help=__doc__, no_args_is_help=True)


@reward_app.command("record")
def record(
    env: str = typer.Option(..., "--env", help="Built-in task, e.g. mujoco:arm_reach."),
    out: Path = typer.Option(..., "--out", help="Dataset folder to write."),
    n: int = typer.Option(6, "--n", help="Episodes."),
    kinds: str = typer.Option("expert", "--kinds", help="Comma list: expert,near,blocked,random."),
    seed: int = typer.Option(20000, "--seed", help="First reset seed."),
) -> None:
    """Record labelled demonstrations (frames + per-frame success labels) for `reward optimize`."""
    demonstrations = record_episodes(env, n, seed, kinds=[k.strip() for k in kinds.split(",") if k])
    save_demonstrations(demonstrations, out)
    print(
        f"wrote {len(demonstrations)} demonstrations to {out} "
        f"({sum(int(d.labels.sum()) for d in demonstrations)} positive frames)"
    )


PROPOSER_HELP = (
    "metacritic (default: the reference multimodal Meta-Critic), phrase-bank-ablation "
    "(ABLATION: generic wording edits, no model) or llm (text-only)."
)
PROPOSER_MODEL_HELP = (
    "Image-text-to-text model (hub id or folder) of the Meta-Critic; without --judge it is "
    "also the reference Critic (single-model mode, as the reference). For --proposer llm: "
    "the LLM."
)


def judge_and_proposer(
    judge: str | None, proposer: str, proposer_model: str | None, device: str
) -> tuple[BaseJudge, Proposer]:
    """The judge and the proposer of a Demo2Reward command.

    No ``judge``: with the Meta-Critic, the reference Critic on ``proposer_model`` sharing its
    weights; else the shipped minijudge. The Meta-Critic without ``proposer_model`` uses the
    judge's own model when it has one.

    Raises:
        ConfigError: a proposer that needs a model and has none.
    """
    if judge is None and proposer == "metacritic":
        if not proposer_model:
            raise ConfigError(
                "the reference Meta-Critic needs an image-text-to-text model",
                fix="pass --proposer-model HUB_ID_OR_FOLDER, or --proposer "
                "phrase-bank-ablation for the no-model ablation",
            )
        critic = load_judge(f"critic:{proposer_model}", device=device)
        return critic, default_proposer(critic)
    j = load_judge(judge or "minijudge", device=device)
    if proposer == "metacritic" and not proposer_model:
        return j, default_proposer(j)
    if proposer in ("metacritic", "llm"):
        if not proposer_model:
            raise ConfigError(f"--proposer {proposer} needs --proposer-model")
        return j, PROPOSERS.make(proposer, model=proposer_model, device=device)
    return j, PROPOSERS.make(proposer)


@reward_app.command("optimize")
@config_options(
    Demo2RewardConfig,
    "template",
    "iterations",
    "restarts",
    "budget",
    "stride",
    "min_tpr",
    "seed",
)
def optimize(
    demonstrations: Path = typer.Option(
        ..., "--demonstrations", help="Labelled demonstrations folder (3 to 10 episodes)."
    ),
    out: Path = typer.Option(..., "--out", help="Folder for instruction.json."),
    judge: str = typer.Option(
        None,
        "--judge",
        help="Judge spec (see `embodied judge`; critic:MODEL is the reference Critic, "
        "critic-calibrated:MODEL its calibrated-threshold variant). Default: the reference "
        "Critic on --proposer-model, or minijudge with a proposer that needs no model.",
    ),
    heldout: Path = typer.Option(
        None, "--heldout", help="Held-out demonstrations to report before/after."
    ),
    proposer: str = typer.Option("metacritic", "--proposer", help=PROPOSER_HELP),
    proposer_model: str = typer.Option(None, "--proposer-model", help=PROPOSER_MODEL_HELP),
    camera: str = typer.Option(None, "--camera", help="Camera key of the demonstrations."),
    device: str = typer.Option("auto", "--device"),
    as_json: bool = typer.Option(False, "--json", help="Print the result JSON."),
    *,
    config: dict[str, Any],
) -> None:
    """Run Demo2Reward and save the frozen instruction with its calibration table."""
    cfg = Demo2RewardConfig(**config)
    j, prop = judge_and_proposer(judge, proposer, proposer_model, device)
    train = load_demonstrations(demonstrations, camera=camera)

    def show(row: dict) -> None:
        if not as_json:
            mark = "+" if row["accepted"] else " "
            print(
                f"{mark} r{row['restart']:>2} it{row['iteration']:>2} J={row['J']:7.2f} "
                f"TPR={row['tpr']:5.1f} FPR={row['fpr']:5.1f}  {row['template']}"
            )

    result = optimize_instruction(j, train, prop, cfg, progress=show)
    table = DemonstrationSet(train, cfg.n_context, cfg.stride, 3, 10).table(j, result.template)
    held = None
    if heldout is not None:
        hs = DemonstrationSet(
            load_demonstrations(heldout, camera=camera), cfg.n_context, cfg.stride
        )
        held = {
            "before": hs.evaluate(j, cfg.template).to_dict(),
            "after": hs.evaluate(j, result.template).to_dict(),
        }
    path = save_result(result, out, j.describe(), table, held)
    if as_json:
        print(json.dumps({**result.to_dict(), "heldout": held, "path": str(path)}))
        return
    print(
        f"best: {result.template}\n"
        f"  demonstrations J {result.initial.j:.2f} -> {result.best.j:.2f}, "
        f"FPR {result.initial.rates.fpr:.1f}% -> {result.best.rates.fpr:.1f}%"
    )
    if held:
        print(
            f"  held-out FPR {held['before']['fpr']:.1f}% -> {held['after']['fpr']:.1f}%, "
            f"TPR {held['before']['tpr']:.1f}% -> {held['after']['tpr']:.1f}%"
        )
    print(f"saved {path}")


@reward_app.command("experiment")
@config_options(
    Demo2RewardConfig, "iterations", "restarts", "budget", Opt("stride", default=2), "min_tpr"
)
def experiment(
    judge: str = typer.Option(
        None,
        "--judge",
        help="Judge spec. Default: the reference Critic on --proposer-model, or minijudge "
        "with a proposer that needs no model.",
    ),
    proposer: str = typer.Option("metacritic", "--proposer", help=PROPOSER_HELP),
    proposer_model: str = typer.Option(None, "--proposer-model", help=PROPOSER_MODEL_HELP),
    device: str = typer.Option("auto", "--device"),
    env: list[str] = typer.Option(None, "--env", help="Tasks (default: the built-in ones)."),
    n_demonstrations: int = typer.Option(6, "--n-demonstrations"),
    n_heldout: int = typer.Option(16, "--n-heldout"),
    out: Path = typer.Option(None, "--out", help="Write the report JSON here (atomic)."),
    as_json: bool = typer.Option(False, "--json"),
    *,
    config: dict[str, Any],
) -> None:
    """Demo2Reward on the built-in tasks: held-out TPR/TNR/FPR/FNR before and after.

    The threshold is calibrated on the expert demonstrations with the starting instruction (as
    a user would); held-out episodes include near misses, hovering just above the target,
    reaching the wrong cube (arm_reach), blocked routes (reach_around) and random motion.
    `--proposer phrase-bank-ablation` is the no-model ablation (report it as such).
    """
    cfg = Demo2RewardConfig(**config)
    j, prop = judge_and_proposer(judge, proposer, proposer_model, device)
    report = heldout_experiment(
        j,
        env or BUILTIN_TASKS,
        n_demonstrations,
        n_heldout,
        cfg,
        proposer=prop,
        progress=None if as_json else print,
    )
    if out is not None:
        write_json(out, report)
    print(json.dumps(report) if as_json else format_table(report))


@reward_app.command("tiny-vlm")
def tiny_vlm(
    out: Path = typer.Option(..., "--out", help="Folder to write the model and processor to."),
    seed: int = typer.Option(0, "--seed", help="Torch seed of the random weights."),
) -> None:
    """Write a tiny RANDOM-weight LLaVA (CLIP vision tower + Llama LM) with its processor: a
    stand-in that runs the Meta-Critic and the Critic code paths offline on a CPU in seconds.
    Figures measured with it test the pipeline, not Demo2Reward's claim."""
    from embodied.rewards.tiny import build_tiny_llava

    print(f"wrote {build_tiny_llava(out, seed=seed)} (random weights: a stand-in, not a VLM)")


_RL_FIELDS = (
    *(Opt(f.name, given_only=True) for f in dataclasses.fields(JudgeRLConfig) if f.name != "ppo"),
    *nested_options(JudgeRLConfig, "ppo", given_only=True),
)
_RL_BUDGET_HELP = (
    f"Budget preset {sorted(RL_BUDGETS)}: cpu = 3 seeds x 3 arms x 100k env steps (about 40 min "
    "on 2 shared CPU cores for reach_around); smoke = seconds. Options given explicitly "
    "override it."
)


@reward_app.command("rl")
@config_options(JudgeRLConfig, *_RL_FIELDS)
def rl(
    out: Path = typer.Option(..., "--out", help="Output folder (results.json, results.md)."),
    budget: str = typer.Option("cpu", "--budget", help=_RL_BUDGET_HELP),
    workers: int = typer.Option(
        1, "--workers", min=1, help="Runs trained at once (processes); results do not depend on it."
    ),
    *,
    config: dict[str, Any],
) -> None:
    """SB3 PPO on state observations with the success reward from the simulator (oracle), the
    judge with the task instruction, and the judge with the Demo2Reward instruction; success
    of each by the simulator on held-out seeds (Wilson 95 %)."""
    try:
        if budget not in RL_BUDGETS:
            raise ConfigError(
                f"budget {budget!r} is not a preset", fix=f"use one of {sorted(RL_BUDGETS)}"
            )
        cfg = JudgeRLConfig(**merge_ppo_layers(JUDGE_RL_PPO, RL_BUDGETS[budget], nest(config)))
    except ConfigError as exc:  # a bad option value is a usage error (exit 2)
        raise typer.BadParameter(str(exc)) from exc
    summary = run_judge_rl(out, cfg, workers=workers)
    print(judge_rl_markdown(summary))
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}")


def register(app: typer.Typer) -> None:
    """Add the ``reward`` command group to ``app``."""
    app.add_typer(reward_app, name="reward")
