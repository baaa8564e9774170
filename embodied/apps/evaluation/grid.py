"""The episode grid: task x episode (seed / init state) x variant, made explicit.

Env families may provide hooks (duck-typed on the object registered in ``sim.ENVS``):

* ``expand(task) -> list[str]``: the task ids a (suite) id names;
* ``group(task) -> str``: the averaging group of a task (e.g. its suite);
* ``num_init_states(task) -> int``: fixed init states; episode ``k`` uses ``k % N``;
* ``default_episodes(task, env_kwargs) -> int``: episodes per task of the family's protocol
  (``env_kwargs``: the family's kwargs from :attr:`EvalConfig.env_kwargs`).

Families without hooks are single tasks, grouped by their own id, with seeds only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sim
from embodied.apps.evaluation.configuration_evaluation import EpisodeSpec, EvalConfig
from embodied.errors import UnknownNameError

DEFAULT_EPISODES = 10
"""Episodes per task for families without a protocol default."""


@dataclass(frozen=True)
class TaskEntry:
    """One task of the grid before episodes are laid out."""

    env_id: str
    group: str
    num_init_states: int | None
    default_episodes: int


def expand_tasks(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> list[TaskEntry]:
    """The tasks ``env_id`` names, with their group, init-state count and default episodes."""
    family_name, task = sim.split_env_id(env_id)
    family = sim.ENVS.make(family_name)
    expand = getattr(family, "expand", None)
    if expand is not None:
        tasks = expand(task)
    else:
        known = family.tasks()
        if known and task not in known:
            raise UnknownNameError(
                f"unknown {family_name} task {task!r}; tasks: {', '.join(sorted(known))}",
                fix="run `embodied envs` to list env ids",
            )
        tasks = [task]
    out = []
    for t in tasks:
        group_fn = getattr(family, "group", None)
        n_init_fn = getattr(family, "num_init_states", None)
        default_fn = getattr(family, "default_episodes", None)
        out.append(
            TaskEntry(
                env_id=f"{family_name}:{t}",
                group=group_fn(t) if group_fn else f"{family_name}:{t}",
                num_init_states=n_init_fn(t) if n_init_fn else None,
                default_episodes=default_fn(t, dict(env_kwargs or {}))
                if default_fn
                else DEFAULT_EPISODES,
            )
        )
    return out


def _scene(n_init: int | None, config: EvalConfig, k: int) -> tuple[int | None, dict[str, int]]:
    """Episode ``k``'s fixed init state (or None) and its reset options."""
    if n_init is None:
        return None, {}
    if config.scenes == "sampled":  # a placement the family samples, no fixed init state
        return None, {"placement_seed": config.seed + k}
    return k % n_init, {"init_state": k % n_init}


def build_grid(config: EvalConfig) -> list[EpisodeSpec]:
    """Lay out every episode of ``config``, task-major so workers can reuse their envs.

    Episode ``k`` of a task uses seed ``config.seed + k`` and, where the family has fixed
    init states, ``reset_options={"init_state": k % N}`` (``config.scenes == "sampled"``:
    ``{"placement_seed": seed + k}`` instead). Every variant sees the same
    seeds and init states (paired comparison).
    """
    specs: list[EpisodeSpec] = []
    seen: set[str] = set()
    for env_id in config.env_ids:
        family = env_id.partition(":")[0]
        for entry in expand_tasks(env_id, config.env_kwargs.get(family)):
            if entry.env_id in seen:
                continue
            seen.add(entry.env_id)
            n = config.episodes if config.episodes is not None else entry.default_episodes
            for variant in config.variants:
                for k in range(n):
                    init, options = _scene(entry.num_init_states, config, k)
                    specs.append(
                        EpisodeSpec(
                            index=len(specs),
                            env_id=entry.env_id,
                            group=entry.group,
                            episode=k,
                            seed=config.seed + k,
                            init_state=init,
                            variant=variant.name,
                            reset_options=options,
                            record_video=k in config.video_episodes,
                        )
                    )
    return specs
