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
from typing import Any

import policies
import sim
from embodied.errors import ConfigError
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
        judge: minijudge, a checkpoint folder, generative:<model>, contrastive:<model>.
        template: Instruction template with {task}.
        camera: Camera to judge (default: first).
        per_frame: Also judge every frame vs the oracle.
        device: auto, cpu or cuda.
    """

    episodes: str | os.PathLike[str] | None = None
    env: str | None = None
    policy: str = "expert"
    n: int = 4
    seed: int = 0
    judge: str = "minijudge"
    template: str | None = None
    camera: str | None = None
    per_frame: bool = False
    device: str = "auto"

    def __post_init__(self) -> None:
        if (self.episodes is None) == (self.env is None):
            raise ConfigError(
                "pass exactly one of --episodes DIR or --env ENV_ID (episodes "
                f"{self.episodes!r}, env {self.env!r})",
                fix="e.g. `embodied judge --env mujoco:arm_reach --n 4`",
            )
        if self.n < 1:
            raise ConfigError(f"n must be >= 1 (episodes to roll out), got {self.n}", fix="--n 4")
        if self.judge == "oracle":
            raise ConfigError(
                "judge 'oracle' is the reference, not a judge to score",
                fix="pass --judge minijudge (agreement with the oracle is reported)",
            )
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", self.device):
            raise ConfigError(f"device {self.device!r} unknown", fix="use auto, cpu or cuda[:N]")


def judge_agreement(config: JudgeAgreementConfig) -> dict[str, Any]:
    """Judge ``config``'s episodes; the report of :func:`~embodied.rewards.judging.judge_episodes`.

    Returns:
        ``{"judge", "episodes": [{index, task, judge_prob, judge_success, oracle_success,
        agree}], "agreement": {accuracy, tpr, tnr, ...}, "frame_agreement", ...}``.
    """
    judge = load_judge(config.judge, device=config.device)
    source: Any = config.episodes
    if config.env is not None:
        env_kwargs = {"camera": True} if config.env.startswith("mujoco:") else {}
        env = sim.make(config.env, **env_kwargs)
        try:
            pol = policies.load(config.policy, env=env)
            source = [rollout(env, pol, seed=config.seed + i) for i in range(config.n)]
        finally:
            env.close()
    return judge_episodes(
        source,
        judge,
        template=config.template,
        camera=config.camera,
        per_frame=config.per_frame,
    )
