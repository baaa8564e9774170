"""Judge episodes and report judge-vs-oracle agreement.

Scores recorded (`--episodes`) or freshly rolled-out (`--env`) episodes with a
judge.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from embodied.apps.cli._config_options import Opt, config_options
from embodied.apps.judge import JudgeAgreementConfig, judge_agreement
from embodied.io import write_json
from embodied.rewards.demo2reward import load_instruction


def register(app: typer.Typer) -> None:
    """Add the ``judge`` command to ``app``."""

    @app.command("judge", help=__doc__)
    @config_options(
        JudgeAgreementConfig,
        Opt("episodes", type=Path),
        "env",
        "policy",
        "n",
        "seed",
        "judge",
        "template",
        "camera",
        Opt("per_frame", negatable=False),
        "device",
    )
    def judge(
        instruction_file: Path = typer.Option(
            None, "--instruction", help="instruction.json from `embodied reward optimize`."
        ),
        out: Path = typer.Option(None, "--out", help="Write the report JSON here (atomic)."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON only."),
        *,
        config: dict[str, Any],
    ) -> None:
        if instruction_file is not None:
            config["template"] = load_instruction(instruction_file)
        report = judge_agreement(JudgeAgreementConfig(**config))
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
