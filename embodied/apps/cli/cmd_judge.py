"""Judge episodes and report each judge's calibration against the simulator oracle.

Scores recorded (`--episodes`) or freshly rolled-out (`--env`) episodes with one or more
judges (`--judge oracle,minijudge,...`, the same episodes for all): ROC-AUC, TPR/TNR/FPR/FNR
at each judge's threshold, calibration error, and a reliability diagram next to `--out`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from embodied.apps.cli._config_options import Opt, config_options
from embodied.apps.judge import JudgeAgreementConfig, judge_agreement, reliability_plot
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
            None, "--instruction", help="instruction.json from `embodied lab reward optimize`."
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
            reliability_plot(report, Path(out).with_suffix(".png"))
        if as_json:
            print(json.dumps(report, default=float))
            return
        first = report["judges"][0]
        for i, row in enumerate(first["episodes"]):
            probs = "  ".join(
                f"{r['spec']} p={r['episodes'][i]['judge_prob']:.3f}" for r in report["judges"]
            )
            print(
                f"episode {row['index']:3d}  oracle="
                f"{'success' if row['oracle_success'] else 'failure':7s}  {probs}  {row['task']}"
            )
        levels = [("episode", "agreement")]
        if first["frame_agreement"]:
            levels.append(("frame", "frame_agreement"))
        for name, key in levels:
            print(f"{name} level, against the simulator oracle:")
            for r in report["judges"]:
                a = r[key]
                print(
                    f"  {r['spec']:24s} n={a['n']:5d}  AUC {a['roc_auc']:.3f}  at p>={a['threshold']:.2f}: "
                    f"TPR {a['tpr']:.1f}  TNR {a['tnr']:.1f}  FPR {a['fpr']:.1f}  FNR {a['fnr']:.1f}  "
                    f"agreement {a['accuracy']:.1f}%  ECE {a['ece']:.3f}"
                )
        if out is not None:
            print(f"wrote {out} and {Path(out).with_suffix('.png')} (reliability diagram)")
