"""Judge episodes and report judge-vs-oracle agreement.

Scores recorded (`--episodes`) or freshly rolled-out (`--env`) episodes with a
judge.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

import policies
import sim
from embodied.errors import ConfigError
from embodied.io import write_json
from embodied.loop import rollout
from embodied.rewards import load_judge
from embodied.rewards.demo2reward import load_instruction
from embodied.rewards.judging import judge_episodes


def register(app: typer.Typer) -> None:
    """Add the ``judge`` command to ``app``."""

    @app.command("judge", help=__doc__)
    def judge(
        episodes: Path = typer.Option(
            None, "--episodes", help="Dataset folder from `embodied collect`."
        ),
        env: str = typer.Option(
            None, "--env", help="Roll out live instead, e.g. mujoco:arm_reach."
        ),
        policy: str = typer.Option(
            "expert", "--policy", help="Policy name or checkpoint (with --env)."
        ),
        n: int = typer.Option(4, "--n", help="Episodes to roll out (with --env)."),
        seed: int = typer.Option(0, "--seed", help="First reset seed (with --env)."),
        judge_spec: str = typer.Option(
            "minijudge",
            "--judge",
            help="minijudge, a checkpoint folder, generative:<model>, contrastive:<model>.",
        ),
        template: str = typer.Option(None, "--template", help="Instruction template with {task}."),
        instruction_file: Path = typer.Option(
            None, "--instruction", help="instruction.json from `embodied reward optimize`."
        ),
        camera: str = typer.Option(None, "--camera", help="Camera to judge (default: first)."),
        per_frame: bool = typer.Option(
            False, "--per-frame", help="Also judge every frame vs the oracle."
        ),
        device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
        out: Path = typer.Option(None, "--out", help="Write the report JSON here (atomic)."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON only."),
    ) -> None:
        if (episodes is None) == (env is None):
            raise ConfigError(
                "pass exactly one of --episodes DIR or --env ENV_ID",
                fix="e.g. `embodied judge --env mujoco:arm_reach --n 4`",
            )
        if instruction_file is not None:
            template = load_instruction(instruction_file)
        j = load_judge(judge_spec, device=device) if judge_spec != "oracle" else None
        if j is None:
            raise ConfigError(
                "the oracle is the reference, not a judge to score",
                fix="pass --judge minijudge (agreement with the oracle is reported)",
            )
        if episodes is not None:
            source: Any = episodes
        else:
            e = sim.make(env, camera=True) if env.startswith("mujoco:") else sim.make(env)
            pol = policies.load(policy, env=e)
            source = [rollout(e, pol, seed=seed + i) for i in range(n)]
        report = judge_episodes(
            source,
            j,
            template=template,
            camera=camera,  # type: ignore[arg-type]
            per_frame=per_frame,
        )
        if out is not None:
            write_json(out, report)
        if as_json:
            print(json.dumps(report, default=float))
            return
        for row in report["episodes"]:
            print(
                f"episode {row['index']:3d}  p={row['judge_prob']:.3f}  judge="
                f"{'success' if row['judge_success'] else 'failure':7s}  oracle="
                f"{'success' if row['oracle_success'] else 'failure':7s}  {row['task']}"
            )
        agr = report["agreement"]
        print(
            f"episode agreement {agr['accuracy']:.1f}% (TPR {agr['tpr']:.1f}, TNR "
            f"{agr['tnr']:.1f}) over {len(report['episodes'])} episodes"
        )
        if report["frame_agreement"]:
            fa = report["frame_agreement"]
            print(
                f"frame agreement {fa['accuracy']:.1f}% (TPR {fa['tpr']:.1f}, TNR {fa['tnr']:.1f})"
            )
