"""Judge episodes and report judge-vs-oracle agreement.

:func:`judge_agreement` is what ``embodied judge`` runs: it scores recorded episodes (a
dataset folder from ``embodied collect``) or freshly rolled-out ones (an env and a policy)
with a judge, and compares each verdict with the simulator's oracle
(:func:`embodied.rewards.judging.judge_episodes`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import policies
import sim
from embodied.apps.plotting import plot_reliability
from embodied.config import Rule, checked, validate
from embodied.loop import rollout
from embodied.rewards import load_judge
from embodied.rewards.judging import judge_episodes


@dataclass(frozen=True)
class JudgeAgreementConfig:
    """Which episodes to judge, with which judge.

    Args:
        episodes: Dataset folder from `embodied collect`.
        env: Roll out live instead, e.g. mujoco:arm_reach.
        policy: Policy name or checkpoint (with --env).
        n: Episodes to roll out (with --env).
        seed: First reset seed (with --env).
        judge: One or more judges, comma-separated, scored on the same episodes: minijudge,
            a checkpoint folder, generative:<model>, contrastive:<model>, or oracle (the
            simulator's own verdict: the reference row).
        template: Instruction template with {task}.
        camera: Camera to judge (default: first).
        per_frame: Also judge every frame vs the oracle.
        device: auto, cpu or cuda.
    """

    episodes: str | os.PathLike[str] | None = None
    env: str | None = None
    policy: str = "expert"
    n: int = checked(4, ge=1, fix="--n 4 (episodes to roll out)")
    seed: int = 0
    judge: str = "minijudge"
    template: str | None = None
    camera: str | None = None
    per_frame: bool = False
    device: str = "auto"

    config_name: ClassVar[str] = "judge agreement"
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "episodes",
            lambda c: (c.episodes is None) != (c.env is None),
            "and env={env!r}: pass exactly one of --episodes DIR or --env ENV_ID",
            "e.g. `embodied judge --env mujoco:arm_reach --n 4`",
        ),
        Rule(
            "judge", lambda c: bool(c.judges()), "names no judge", "e.g. --judge oracle,minijudge"
        ),
        Rule(
            "device",
            lambda c: re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", c.device) is not None,
            "is unknown",
            "use auto, cpu or cuda[:N]",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    def judges(self) -> list[str]:
        """The judge specs in ``judge``, in order."""
        return [j.strip() for j in self.judge.split(",") if j.strip()]


def judge_agreement(config: JudgeAgreementConfig) -> dict[str, Any]:
    """Judge ``config``'s episodes with each judge; one report per judge, same episodes.

    Returns:
        ``{"judges": [report, ...]}``, each report that of
        :func:`~embodied.rewards.judging.judge_episodes` (``judge``, ``episodes``,
        ``agreement`` and ``frame_agreement`` in the shared calibration format) with
        ``spec`` added.
    """
    source: Any = config.episodes
    if config.env is not None:
        env_kwargs = {"camera": True} if config.env.startswith("mujoco:") else {}
        env = sim.make(config.env, **env_kwargs)
        try:
            pol = policies.load(config.policy, env=env)
            source = [rollout(env, pol, seed=config.seed + i) for i in range(config.n)]
        finally:
            env.close()
    reports = []
    for spec in config.judges():
        judge: Any = spec if spec == "oracle" else load_judge(spec, device=config.device)
        report = judge_episodes(
            source,
            judge,
            template=config.template,
            camera=config.camera,
            per_frame=config.per_frame,
        )
        reports.append({"spec": spec, **report})
    return {"judges": reports}


def reliability_plot(report: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Reliability diagram of every judge in ``report`` (frame-level when judged per frame)."""
    level = "frame_agreement" if report["judges"][0]["frame_agreement"] else "agreement"
    curves = {r["spec"]: r[level] for r in report["judges"]}
    n = report["judges"][0][level]["n"]
    what = "frames" if level == "frame_agreement" else "episodes (final clip)"
    return plot_reliability(curves, Path(path), f"judges vs simulator oracle, {n} {what}")
