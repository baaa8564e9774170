"""Train the tiny VLA of the steering experiments: ``embodied train vla``.

A tiny OpenVLA (the classes of openvla-7b, a few million parameters) behaviour-cloned on
scripted-expert demonstrations at three commanded speeds (the speed adverb in the
instruction) on ``mujoco:arm_reach``: :func:`train_tiny_on_env`. :func:`steer_env` builds the
env with its cube layout and demonstration targets. The lab's steering experiments
(:mod:`embodied.apps.lab.steer`) train the same model with these functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import policies
import sim
from embodied.apps.training.config_vla import TINY_MAX_IMAGE, TinyVLAConfig
from embodied.contracts import Env
from embodied.distributed import Distributed
from embodied.errors import ConfigError
from embodied.loop import Episode, rollout
from policies.openvla.loading_openvla import save_pretrained
from policies.openvla.modeling_openvla import OpenVLAModel
from policies.openvla.processor_openvla import OpenVLAProcessor
from policies.openvla.training_openvla import (
    BCSettings,
    DemonstrationSteps,
    build_tiny_vla,
    train_bc,
)
from sim.mujoco.arm_reach import COLORS

SPEED_LEVELS: dict[str, tuple[tuple[float, float], str]] = {
    "slow": ((0.04, 0.08), "slowly"),
    "normal": ((0.09, 0.15), ""),
    "fast": ((0.16, 0.25), "quickly"),
}
"""Demonstration level -> (range of the expert's per-episode cruise speed in m/s, adverb appended to
the instruction). Speeds vary within a level, so the model's action-token distribution for
one instruction spreads over a range of speeds (what makes steering graded)."""

Log = Callable[[str], None]
"""A progress printer: takes one line."""


def no_log(_: str) -> None:
    """A :data:`Log` that prints nothing."""


@dataclass
class DemonstrationCollector:
    """Gathers the steps of recorded episodes, one episode at a time, into
    :class:`DemonstrationSteps` (every step of an episode shares its instruction, index and
    concept value).

    Attributes:
        camera: Observation key of the frames kept.
        images: Per episode, its (T, H, W, 3) frames.
        actions: Per episode, its (T, action_dim) actions.
        instructions: Per step, the instruction the model sees.
        episode: Per step, its episode index.
        concept: Per step, the episode's concept value (cruise speed, m/s).
    """

    camera: str
    images: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    instructions: list[str] = field(default_factory=list)
    episode: list[int] = field(default_factory=list)
    concept: list[float] = field(default_factory=list)

    def add(self, ep: Episode, index: int, instruction: str, concept: float) -> None:
        """Append every step of ``ep`` as episode ``index`` with ``instruction`` and ``concept``."""
        n = len(ep)
        self.images.append(ep.observations[self.camera])
        self.actions.append(ep.actions)
        self.instructions += [instruction] * n
        self.episode += [index] * n
        self.concept += [concept] * n

    def build(self, meta: dict[str, Any]) -> DemonstrationSteps:
        """The steps gathered so far, with ``meta`` describing how they were made."""
        return DemonstrationSteps(
            np.concatenate(self.images),
            self.instructions,
            np.concatenate(self.actions),
            np.asarray(self.episode),
            np.asarray(self.concept, dtype=np.float64),
            meta,
        )


def collect_speed_demonstrations(
    env: Env,
    episodes_per_level: int,
    seed: int = 0,
    levels: dict[str, tuple[tuple[float, float], str]] | None = None,
    reset_options: dict[str, Any] | None = None,
    targets: Sequence[str] = (),
    log: Log = no_log,
) -> DemonstrationSteps:
    """Expert demonstrations at each speed level, instruction suffixed with the level's adverb.

    Args:
        env: The env (``mujoco:arm_reach``) with a camera.
        episodes_per_level: Episodes per (level, target).
        seed: First reset seed.
        levels: Level -> ((min, max) speed m/s, adverb); default :data:`SPEED_LEVELS`.
        reset_options: Base reset options (e.g. a fixed layout ``cubes``).
        targets: Target names cycled through reset option ``target`` (empty = env's choice).
        log: Progress printer.
    """
    levels = levels or SPEED_LEVELS
    steps = DemonstrationCollector(env.observation_spec.image_keys[0])
    e = 0
    for name, (speed_range, adverb) in levels.items():
        expert = policies.load("expert", env=env, speed_range=tuple(speed_range), seed=seed)
        for _k in range(episodes_per_level):
            for target in targets or (None,):
                opts = dict(reset_options or {})
                if target is not None:
                    opts["target"] = target
                ep = rollout(env, expert, seed=seed + e, reset_options=opts or None)
                speed = float(getattr(expert, "current_speed", np.linalg.norm(ep.actions[0, :3])))
                steps.add(ep, e, f"{ep.instruction} {adverb}".strip(), speed)
                e += 1
        log(
            f"demonstrations: level {name} ({speed_range} m/s) done, "
            f"{len(steps.instructions)} steps so far"
        )
    return steps.build(
        {
            "env_id": env.env_id,
            "levels": {k: list(v) for k, v in levels.items()},
            "camera": steps.camera,
            "first_seed": seed,
        }
    )


FIXED_LAYOUT: dict[str, tuple[float, float]] = {
    "red": (0.28, 0.12),
    "green": (0.36, -0.04),
    "blue": (0.25, -0.14),
    "yellow": (0.40, 0.13),
}
"""Cube (x, y) in m of the CPU experiment's fixed layout (``--layout fixed``)."""

LAYOUT_JITTER_M: float = TinyVLAConfig.jitter
"""``--layout jittered``'s default ``--jitter`` (declared once, on :class:`TinyVLAConfig`): each
cube of :data:`FIXED_LAYOUT` moves uniformly up to this far (m) per axis, drawn from the episode
seed. At 0.025 m the closest pair (red, yellow: 0.12 m apart) stays at least 0.049 m apart, more
than a cube's 0.04 m width."""


def steer_env(
    env_id: str, image_size: int | None, layout: str, jitter_m: float = LAYOUT_JITTER_M
) -> tuple[Env, dict[str, Any], list[str]]:
    """The env, its reset options and the speed-demonstration targets (arm_reach: the cubes).

    Args:
        env_id: Env id, e.g. ``mujoco:arm_reach`` or ``libero:...``.
        image_size: Camera size in pixels (mujoco envs; falsy = the env's default).
        layout: arm_reach cube layout: ``fixed`` (one scene for every seed), ``jittered`` (the
            fixed layout moved up to :data:`LAYOUT_JITTER_M` per cube and seed: distinct scenes,
            colour still tells roughly where the cube is) or ``random`` (anywhere on the table).
        jitter_m: ``jittered``: the largest move per axis (m).

    Raises:
        ConfigError: An unknown ``layout`` (arm_reach).
    """
    kwargs: dict[str, Any] = {}
    if env_id.startswith("mujoco:") and image_size:
        kwargs["image_size"] = image_size
    env = sim.make(env_id, **kwargs)
    reset: dict[str, Any] = {}
    targets: list[str] = []
    if env_id == "mujoco:arm_reach":
        targets = list(COLORS)
        if layout in ("fixed", "jittered"):
            reset["cubes"] = {k: list(v) for k, v in FIXED_LAYOUT.items()}
        if layout == "jittered":
            reset["jitter"] = float(jitter_m)
        elif layout not in ("fixed", "random"):
            raise ConfigError(
                f"unknown --layout {layout!r}", fix="use 'fixed', 'jittered' or 'random'"
            )
    return env, reset, targets


def demonstration_seeds(demonstrations: DemonstrationSteps) -> list[int] | None:
    """``[first, end)`` of the reset seeds ``demonstrations`` were recorded on (episode ``e`` on
    seed ``first_seed + e``), or None when they were not recorded here (a dataset)."""
    first = demonstrations.meta.get("first_seed")
    if first is None:
        return None
    return [int(first), int(first) + len(np.unique(demonstrations.episode))]


def train_tiny_on_env(
    env: Env,
    out: Path,
    episodes_per_level: int,
    bc: BCSettings,
    reset_options: dict[str, Any] | None = None,
    targets: Sequence[str] = (),
    seed: int = 0,
    log: Log = no_log,
    dist: Distributed | None = None,
    demonstrations: DemonstrationSteps | None = None,
    action_bounds: str = "q99",
    **config_overrides: Any,
) -> tuple[OpenVLAModel, OpenVLAProcessor, DemonstrationSteps, list[dict[str, float]]]:
    """Collect speed demonstrations, behaviour-clone a tiny OpenVLA, save it to ``out``.

    Under ``torchrun`` pass ``dist``: every rank collects the same (deterministic)
    demonstrations and trains on its share of each global batch; only the main process saves.
    ``demonstrations`` given (e.g. graded ones, :mod:`~embodied.apps.lab.steer_dial`)
    are trained on instead of the three named speed classes. ``action_bounds``: how the
    actions map onto the bins (:func:`~policies.openvla.processor_openvla.compute_norm_stats`).

    Returns:
        Model, processor, demonstrations and the training history (one dict per logged step).
    """
    if demonstrations is None:  # the three named speed classes
        demonstrations = collect_speed_demonstrations(
            env, episodes_per_level, seed, None, reset_options, targets, log
        )
    names = env.action_spec.names
    mask = [n not in ("gripper",) for n in names]
    key = env.env_id.replace(":", "_")
    image = env.observation_spec.cameras[demonstrations.meta["camera"].removeprefix("image.")]
    side = min(TINY_MAX_IMAGE, image.height)  # the model sees the camera's own pixels
    text = dict(config_overrides.pop("text", {}))
    # every 8 px patch is a position: leave room for the prompt and the action tokens
    text.setdefault("max_position_embeddings", max(256, (side // 8) ** 2 + 128))
    model, proc = build_tiny_vla(
        demonstrations.instructions,
        demonstrations.actions,
        key,
        mask,
        seed,
        action_bounds,
        bc.ordinal_words,  # the whole scale, also numbers no demonstration names
        image_size=side,
        text=text,
        **config_overrides,
    )
    n_params = model.num_parameters() / 1e6
    log(f"tiny OpenVLA: {n_params:.2f} M parameters, {len(demonstrations)} demonstration steps")
    hist = train_bc(
        model,
        proc,
        demonstrations,
        bc,
        progress=lambda s, r: log(
            f"bc step {s}: loss {r['loss']:.4f} token acc {r['token_acc']:.2f} ({r['seconds']:.0f} s)"
        ),
        dist=dist,
    )
    if dist is None or dist.is_main:
        save_pretrained(
            model,
            proc.tokenizer,
            out,
            extra={
                "training": {
                    "history": hist,
                    "settings": asdict(bc),
                    "demonstration_steps": len(demonstrations),
                    "env_id": env.env_id,
                    "reset_options": reset_options or {},
                    "levels": demonstrations.meta.get("levels"),
                    "speed_labels": demonstrations.meta.get("speed_labels", "adverbs"),
                    "speed_range": demonstrations.meta.get("speed_range"),
                    "demonstration_seeds": demonstration_seeds(demonstrations),
                    "world_size": 1 if dist is None else dist.world_size,
                }
            },
        )
    return model, proc, demonstrations, hist
