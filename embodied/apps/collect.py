"""Collect episodes: roll out a policy (default: the scripted expert) and write the successes.

:func:`collect` is what ``embodied collect`` runs. The episodes go into a robomimic-style
shard folder (:class:`embodied.datasets.DatasetWriter`); collecting into an existing folder
continues it after its largest seed, and only with the same env, observations and actions.

``--episodes N`` is what the collection ends with, so rerunning a command is safe: each
episode records the collection it belongs to (a digest of the command's options other than
``--episodes``) and a rerun keeps only what its collection still lacks. A collection killed
part-way (or that gave up for lack of successes) is finished by running the same command
again; the episode being recorded when it died is the only one lost. Other options (another
route, speed, seed) start another collection in the same folder; a larger ``--episodes``
tops the same one up.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import h5py
import numpy as np

import policies
import sim
from embodied.config import Rule, checked, validate
from embodied.datasets import DatasetWriter
from embodied.datasets.hdf5 import (
    _SHARD_RE,
    H5_ERRORS,
    EpisodeData,
    check_global_heaps,
    episode_data,
    read_attr,
)
from embodied.errors import ConfigError, DatasetError
from embodied.io import remove_stale_temps
from embodied.loop import Episode, rollout
from embodied.specs import VectorSpec
from sim.libero.recording import recorded_episode, write_demo_file


def parse_speed(text: float | str | None) -> dict[str, Any]:
    """``"0.3"`` -> ``{"speed": 0.3}``; ``"0.1:0.4"`` -> ``{"speed_range": (0.1, 0.4)}`` (m/s).

    Raises:
        ConfigError: Neither a number nor a ``LO:HI`` range.
    """
    if text is None:
        return {}
    text = str(text)
    try:
        if ":" in text:
            lo, hi = (float(x) for x in text.split(":", 1))
            return {"speed_range": (lo, hi)}
        return {"speed": float(text)}
    except ValueError as exc:
        raise ConfigError(
            f"speed {text!r} is not a number or a LO:HI range (m/s)",
            fix="pass e.g. --speed 0.3 or --speed 0.1:0.4",
        ) from exc


@dataclass(frozen=True)
class CollectConfig:
    """A collection: the env, the policy and its options, how many episodes to keep.

    Args:
        env: Env id, e.g. mujoco:reach_around.
        episodes: Episodes this collection ends with in the folder (a rerun of the same
            command keeps only what is missing).
        policy: Policy name or checkpoint folder.
        seed: Seed of the first episode (then +1 each).
        speed: Expert speed in m/s, or a LO:HI range drawn per episode.
        route: reach_around expert route (left/center/right; default random).
        scene: Reset scene (reach_around).
        camera: Record camera images (default: the task's).
        cameras: Names of the cameras to record (e.g. ``front,top``); implies ``camera``.
        image_size: Camera size (px).
        keep_failures: Also keep episodes that did not succeed.
        max_attempts: Give up after this many episodes (default 3x + 10).
        action_noise: DART (Laskey et al. 2017): the env executes the policy's action plus
            Gaussian noise of this std, as a fraction of each action dimension's half-range
            (then clipped to the range); the dataset's ``actions`` stay the policy's clean
            action (the label) and ``executed_actions`` hold what was sent. The data then
            shows the expert recovering from states its own rollouts never reach. 0: none.
        noise_time_constant: Correlation time (s) of that noise, an AR(1) process with
            stationary std ``action_noise``. 0 is DART's independent noise per step; a
            longer time drifts the state further before the expert corrects it (our
            extension: at 20 Hz independent noise on velocity commands averages out).
        init_states: LIBERO only: ``fixed`` starts episode ``k`` from the task's fixed init
            state ``(seed + k) % 50``, the scenes the standard evaluation runs; ``sampled``
            lets LIBERO place the objects itself from the task's init regions, numpy seeded
            with ``seed + k``: the same distribution, none of the evaluation's scenes (data
            to train a policy that is then evaluated on the fixed ones).
        workers: LIBERO suites (``libero:libero_object``): tasks collected at once, one
            process each (one core each: a task's rendering is single-threaded).
        policy_kwargs: More keyword arguments of the policy factory (``--policy-arg``).

    Derived:
        attempts: ``max_attempts``, or ``3 * episodes + 10`` when it is None.
    """

    config_name: ClassVar[str] = "collect"

    env: str = checked(min_len=1, fix="e.g. mujoco:reach_around")
    episodes: int = checked(10, ge=1, fix="e.g. --episodes 10")
    policy: str = "expert"
    seed: int = 0
    speed: float | str | None = None
    route: str | None = None
    scene: str | None = None
    camera: bool | None = None
    cameras: tuple[str, ...] = ()
    image_size: int | None = checked(
        None, ge=1, fix="e.g. --image-size 64, or leave it out for the task's"
    )
    keep_failures: bool = False
    max_attempts: int | None = None
    action_noise: float = checked(0.0, ge=0, fix="e.g. --action-noise 0.3, or 0 for none")
    noise_time_constant: float = checked(
        0.0, ge=0, fix="e.g. --noise-time-constant 0.3, or 0 for none"
    )
    init_states: str = checked(
        "fixed",
        choices=("fixed", "sampled"),
        fix="pass --init-states fixed (LIBERO's evaluation scenes) or sampled",
    )
    workers: int = checked(1, ge=1, fix="e.g. --workers 2")
    policy_kwargs: Mapping[str, Any] = field(default_factory=dict)
    attempts: int = field(init=False)

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "max_attempts",
            lambda c: c.attempts >= c.episodes,
            "is below episodes={episodes}",
            lambda c: f"pass --max-attempts {c.episodes} or more",
        ),
        Rule(
            "cameras",
            lambda c: not c.cameras or c.camera is not False,
            "with camera=False records nothing",
            "drop --no-camera to record those cameras",
        ),
        Rule(
            "init_states",
            lambda c: c.init_states == "fixed" or c.env.startswith("libero:"),
            "is for LIBERO envs, not {env}",
            "drop --init-states (other envs draw their scene from --seed)",
        ),
        Rule(
            "workers",
            lambda c: c.workers == 1 or c.env.startswith("libero:"),
            "is for parallel collection per task of a LIBERO suite, not for {env}",
            "drop --workers (or collect a LIBERO suite, e.g. libero:libero_object)",
        ),
    )

    def __post_init__(self) -> None:
        attempts = self.max_attempts
        if attempts is None and isinstance(self.episodes, int):
            attempts = 3 * self.episodes + 10
        object.__setattr__(self, "attempts", attempts)
        object.__setattr__(self, "cameras", tuple(self.cameras))
        validate(self)
        parse_speed(self.speed)  # raises on a bad value
        object.__setattr__(self, "policy_kwargs", dict(self.policy_kwargs))

    def env_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``sim.make`` (only the options that were set)."""
        camera: bool | list[str] | None = list(self.cameras) if self.cameras else self.camera
        given = {"camera": camera, "image_size": self.image_size, "scene": self.scene}
        return {k: v for k, v in given.items() if v is not None}

    def make_policy_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``policies.load``: speed, ``policy_kwargs``, route."""
        kwargs = {**parse_speed(self.speed), **self.policy_kwargs}
        if self.route is not None:
            kwargs["route"] = self.route
        return kwargs


@dataclass
class CollectResult:
    """Outcome of :func:`collect`.

    Attributes:
        out: The dataset folder.
        kept: Episodes written by this collection.
        failed: Episodes that did not succeed (written too with ``keep_failures``).
        attempts: Episodes rolled out.
        last_shard: Index of the last shard in the folder (-1: none).
    """

    out: Path
    kept: int
    failed: int
    attempts: int
    last_shard: int


def next_seed(out: Path, default: int) -> int:
    """First episode seed for a (possibly resumed) collection in ``out``.

    Continues after the largest seed recorded in existing shards, so resuming never repeats
    an episode.
    """
    seeds = [default - 1]
    for meta in _shard_metas(out):
        seed = meta.get("seed")
        if isinstance(seed, int):
            seeds.append(seed)
    return max(seeds) + 1


def check_resume(out: Path, env_args: dict[str, Any]) -> None:
    """Refuse to resume a folder recorded on another env or with other observations."""
    meta = out / "meta.json"
    if not meta.exists():
        return
    try:
        old = json.loads(meta.read_text()).get("env_args", {})
    except (OSError, json.JSONDecodeError):
        return
    for key in ("env_id", "observation", "action"):
        if key in old and json.loads(json.dumps(env_args.get(key))) != old[key]:
            raise ConfigError(
                f"{out} holds episodes with a different {key} ({str(old[key])[:120]}) than "
                f"this collection ({str(env_args.get(key))[:120]})",
                fix="collect into a new --out folder, or repeat the original options",
            )


def collect(
    config: CollectConfig,
    out: str | os.PathLike[str],
    on_attempt: Callable[[CollectResult], None] | None = None,
) -> CollectResult:
    """Roll out ``config.policy`` on ``config.env`` until ``config.episodes`` are kept in ``out``.

    Episode ``k`` of the collection is reset with seed ``first + k``, ``first`` being
    ``config.seed`` or, when resuming, one past the largest seed already in ``out``.

    Args:
        config: What to collect.
        out: Dataset folder (created, or resumed if it holds a collection).
        on_attempt: Called after every rollout with the running counts (progress display).

    Returns:
        The counts; ``result.kept == config.episodes``.

    Raises:
        ConfigError: ``out`` holds another env's episodes, or fewer than ``config.episodes``
            were kept within ``config.attempts`` rollouts (those kept stay written).
    """
    out = Path(out)
    remove_stale_temps(out)  # a shard half-written when a collection was killed
    if config.env.startswith("libero:"):
        tasks = collect_tasks(config)
        if len(tasks) > 1:
            return collect_libero_suite(config, out, tasks, on_attempt)
        return collect_libero(replace(config, env=tasks[0]), out, on_attempt)
    env_kwargs = config.env_kwargs()
    env = sim.make(config.env, **env_kwargs)
    try:
        pol_kwargs = config.make_policy_kwargs()
        pol = policies.load(config.policy, env=env, **pol_kwargs)
        env_args = {**env.describe(), "make_kwargs": env_kwargs, "policy": config.policy}
        check_resume(out, env_args)
        writer = DatasetWriter(out, env_args=env_args)
        first_seed = next_seed(out, config.seed)
        result = CollectResult(out, 0, 0, 0, last_shard=writer.next_index - 1)
        collection = collection_id(config)
        left = config.episodes - count_collection(out, collection)

        noise = None
        if config.action_noise > 0:
            noise = ExecutionNoise(
                env.action_spec, config.action_noise, config.noise_time_constant, env.dt
            )

        def keep(ep: Episode, seed: int) -> None:
            del seed  # rollout records it in ep.meta
            ep.meta["policy"] = config.policy
            ep.meta["collection"] = collection
            ep.meta["policy_kwargs"] = pol_kwargs
            for attr in ("current_route", "current_speed"):
                if hasattr(pol, attr):
                    ep.meta[attr.removeprefix("current_")] = getattr(pol, attr)
            if noise is not None:
                ep.meta["action_noise"] = {
                    "std": config.action_noise,
                    "time_constant_s": config.noise_time_constant,
                }
            writer.add(labelled(ep) if noise is not None else ep)
            result.last_shard = writer.next_index - 1

        if left > 0:
            todo = replace(config, episodes=left)
            _roll_until_kept(todo, env, pol, first_seed, keep, result, on_attempt, noise=noise)
            _require_enough(todo, result, f"kept in {out}")
    finally:
        env.close()
    return result


def collection_id(config: CollectConfig) -> str:
    """The digest of ``config``'s options other than the episode count and the attempts: the
    collection its episodes belong to (``meta["collection"]``)."""
    key = asdict(config)
    for name in ("episodes", "max_attempts", "attempts", "workers"):
        key.pop(name)
    text = json.dumps(key, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def count_collection(out: Path, collection: str) -> int:
    """Episodes of ``collection`` already in the dataset folder ``out``."""
    return sum(1 for meta in _shard_metas(out) if meta.get("collection") == collection)


_SHARD_ERRORS: tuple[type[Exception], ...] = (DatasetError, *H5_ERRORS)


def _shard_metas(out: Path) -> Iterator[dict[str, Any]]:
    """The ``meta`` of every episode in ``out``'s readable shards."""
    if not out.is_dir():
        return
    for shard in sorted(out.iterdir()):
        if not _SHARD_RE.match(shard.name):
            continue
        try:
            check_global_heaps(shard)  # before libhdf5 reads an attribute (it could hang)
            with h5py.File(shard, "r") as f:
                data = f["data"]
                if not isinstance(data, h5py.Group):
                    continue
                demos = [data.get(name) for name in data]
                if any(demo is None for demo in demos):
                    continue  # a dangling link: the shard is damaged
                metas = [json.loads(read_attr(demo, "meta") or "{}") for demo in demos]
        except _SHARD_ERRORS:
            continue  # a damaged shard is reported by Dataset, not here
        yield from (m for m in metas if isinstance(m, dict))


class ExecutionNoise:
    """DART's injected noise, as the loop's action filter (between policy and env).

    ``action + n_t`` clipped to the action range, with ``n_t = rho n_{t-1} + sqrt(1 - rho^2)
    std e_t`` per dimension, ``e_t ~ N(0, 1)``, ``rho = exp(-dt / time_constant)`` (0 when
    the time constant is 0), ``std`` = ``fraction`` x the dimension's half-range. The noise
    of episode seed ``s`` is fixed by :meth:`seed`, so a collection is reproducible.

    Args:
        spec: The env's action spec (finite bounds).
        fraction: Stationary std as a fraction of each dimension's half-range.
        time_constant: Correlation time (s); 0 draws independent noise each step.
        dt: Control period (s).
    """

    def __init__(self, spec: VectorSpec, fraction: float, time_constant: float, dt: float):
        low, high = np.asarray(spec.low, dtype=np.float64), np.asarray(spec.high, dtype=np.float64)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ConfigError(
                f"action_noise needs a bounded action space; bounds are {low} to {high}",
                fix="drop --action-noise for this env",
            )
        self.low, self.high = low, high
        self.std = fraction * (high - low) / 2
        self.rho = math.exp(-dt / time_constant) if time_constant > 0 else 0.0
        self._rng = np.random.default_rng(0)
        self._n = np.zeros_like(low)

    def seed(self, episode_seed: int) -> None:
        """Fix the noise of the next episode by its seed."""
        self._rng = np.random.default_rng([int(episode_seed), 0xDA27])

    def reset(self) -> None:
        """Start the episode's noise from its stationary distribution."""
        self._n = self._rng.normal(size=self.std.shape) * self.std

    def __call__(self, action: np.ndarray, obs: Any) -> np.ndarray:
        """The executed action: ``action`` plus this step's noise, clipped to the range."""
        del obs
        fresh = self._rng.normal(size=self.std.shape) * self.std
        self._n = self.rho * self._n + math.sqrt(1.0 - self.rho**2) * fresh
        return np.clip(np.asarray(action, dtype=np.float64) + self._n, self.low, self.high)


def labelled(ep: Episode) -> EpisodeData:
    """``ep`` for training: ``actions`` are the policy's (clean) actions, the labels, and the
    noisy actions the env executed are kept as ``executed_actions``."""
    data = episode_data(ep)
    return replace(
        data, actions=ep.raw_actions, extras={**data.extras, "executed_actions": ep.actions}
    )


def _roll_until_kept(
    config: CollectConfig,
    env: Any,
    pol: Any,
    first_seed: int,
    keep: Callable[[Episode, int], None],
    result: CollectResult,
    on_attempt: Callable[[CollectResult], None] | None,
    noise: ExecutionNoise | None = None,
    reset_options: Callable[[int], dict[str, Any]] | None = None,
    **rollout_kwargs: Any,
) -> None:
    """Roll out episodes ``first_seed, first_seed + 1, ...`` until enough are kept.

    ``reset_options(seed)``: the env's reset options of the episode with that seed."""
    for attempt in range(config.attempts):
        if result.kept >= config.episodes:
            break
        seed = first_seed + attempt
        if noise is not None:
            noise.seed(seed)
        options = reset_options(seed) if reset_options is not None else None
        ep = rollout(env, pol, seed=seed, safety=noise, reset_options=options, **rollout_kwargs)
        if ep.success or config.keep_failures:
            keep(ep, seed)
            result.kept += 1
        result.failed += int(not ep.success)
        result.attempts = attempt + 1
        if on_attempt is not None:
            on_attempt(result)


def _require_enough(config: CollectConfig, result: CollectResult, where: str) -> None:
    if result.kept < config.episodes:
        raise ConfigError(
            f"only {result.kept} of {config.episodes} episodes succeeded within "
            f"{config.attempts} attempts ({where}; {result.failed} failed)",
            fix="raise --max-attempts, pass --keep-failures, or check the policy",
        )


LIBERO_CAMERAS = ("agentview", "eye_in_hand")
"""Cameras a LIBERO collection renders by default (the two of LIBERO's demonstrations)."""
LIBERO_IMAGE_SIZE = 128
"""Default image size (px) of a LIBERO collection, as LIBERO's official files."""


def collect_tasks(config: CollectConfig) -> list[str]:
    """The env ids ``config.env`` names: every task of a LIBERO suite, else itself."""
    if not config.env.startswith("libero:"):
        return [config.env]
    from embodied.apps.evaluation.grid import expand_tasks

    return [entry.env_id for entry in expand_tasks(config.env)]


def libero_demo_path(out: Path, env_id: str) -> Path:
    """Where :func:`collect_libero` writes task ``env_id``: ``out/<task name>_demo.hdf5``."""
    from sim.libero.tasks import resolve_task

    return out / f"{resolve_task(env_id.partition(':')[2]).name}_demo.hdf5"


def _set_environ(environ: dict[str, str]) -> None:
    os.environ.update(environ)  # a worker process's environment (picklable initializer)


def collect_libero_suite(
    config: CollectConfig,
    out: Path,
    tasks: list[str],
    on_attempt: Callable[[CollectResult], None] | None = None,
) -> CollectResult:
    """Collect every task of a LIBERO suite into ``out``, ``config.workers`` tasks at once.

    Each task's file is written whole when the task ends (atomically), so a rerun with the same
    arguments resumes: tasks whose file exists are skipped, the task that was running when
    the collection was killed starts over.
    """
    import concurrent.futures as cf
    import multiprocessing

    todo = [t for t in tasks if not libero_demo_path(out, t).exists()]
    done = len(tasks) - len(todo)
    total = CollectResult(out, config.episodes * done, 0, 0, last_shard=-1)
    if on_attempt is not None:
        on_attempt(total)

    def add(result: CollectResult) -> None:
        total.kept += result.kept
        total.failed += result.failed
        total.attempts += result.attempts
        if on_attempt is not None:
            on_attempt(total)

    configs = [replace(config, env=t, workers=1) for t in todo]
    if config.workers == 1:
        for cfg in configs:
            add(collect_libero(cfg, out))
        return total
    # A forkserver started earlier in this process keeps the environment it started with, so
    # the workers get the assets folder resolved here (failing here, before any work) and GL.
    from sim.libero.resources import ASSETS_ENV_VAR, resolve_assets

    environ = {ASSETS_ENV_VAR: str(resolve_assets())}
    if "MUJOCO_GL" in os.environ:
        environ["MUJOCO_GL"] = os.environ["MUJOCO_GL"]
    context = multiprocessing.get_context("forkserver")  # never fork a GL context
    with cf.ProcessPoolExecutor(
        min(config.workers, len(configs)) or 1,
        mp_context=context,
        initializer=_set_environ,
        initargs=(environ,),
    ) as pool:
        futures = [pool.submit(collect_libero, cfg, out) for cfg in configs]
        for future in cf.as_completed(futures):
            add(future.result())
    return total


def collect_libero(
    config: CollectConfig,
    out: Path,
    on_attempt: Callable[[CollectResult], None] | None = None,
) -> CollectResult:
    """Collect a LIBERO task into ``out/<task name>_demo.hdf5`` in LIBERO's own layout.

    Rolls out without cameras (episode ``k`` starts from LIBERO's fixed init state
    ``(seed + k) % 50``, or with ``init_states="sampled"`` from the placement LIBERO samples
    with numpy seed ``seed + k``), keeps the simulator state before every action, then renders the
    kept episodes' cameras from those states (:mod:`sim.libero.recording`).

    Raises:
        ConfigError: options LIBERO has no use for, an existing file, or too few successes.
    """
    unused = {
        k: v
        for k, v in (("speed", config.speed), ("route", config.route), ("scene", config.scene))
        if v is not None
    }
    if unused:
        raise ConfigError(
            f"{config.env} takes no {sorted(unused)} (got {unused})",
            fix="drop those options; a LIBERO episode is set by its init state (--seed)",
        )
    if config.camera is False:
        raise ConfigError(
            "camera=False: a LIBERO demonstration file always holds camera images",
            fix="drop --no-camera (pick cameras with --cameras agentview,eye_in_hand)",
        )
    cameras = tuple(config.cameras) or LIBERO_CAMERAS
    size = config.image_size or LIBERO_IMAGE_SIZE
    env = sim.make(config.env, cameras=(), record_states=True)
    base: Any = env.unwrapped
    path = libero_demo_path(out, config.env)
    if path.exists():
        raise ConfigError(
            f"{path} exists; LIBERO demonstration files are never overwritten or appended to",
            fix="collect into a new --out folder",
        )
    kept = []
    result = CollectResult(out, 0, 0, 0, last_shard=-1)
    try:
        pol = policies.load(config.policy, env=env, **config.make_policy_kwargs())
        noise = None
        if config.action_noise > 0:
            noise = ExecutionNoise(
                env.action_spec, config.action_noise, config.noise_time_constant, env.dt
            )

        def keep(ep: Episode, seed: int) -> None:
            # the executed actions replay the episode when its cameras are rendered; under
            # noise the expert's clean actions are the labels (DART)
            rec = recorded_episode(env, ep.actions, ep.success)
            rec.meta = {"seed": seed, "policy": config.policy}
            if noise is not None:
                rec.labels = np.asarray(ep.raw_actions, dtype=np.float64)
                rec.meta["action_noise"] = {
                    "std": config.action_noise,
                    "time_constant_s": config.noise_time_constant,
                }
            kept.append(rec)

        sampled = config.init_states == "sampled"
        _roll_until_kept(
            config,
            env,
            pol,
            config.seed,
            keep,
            result,
            on_attempt,
            noise=noise,
            reset_options=(lambda seed: {"placement_seed": seed}) if sampled else None,
            record_images=False,
        )
    finally:
        env.close()
    _require_enough(config, result, "nothing written")

    def make_render_env(cams: Any, image_size: int) -> Any:
        protocol = replace(base.protocol, render_size=image_size)
        return sim.make(config.env, cameras=cams, protocol=protocol)

    write_demo_file(
        path,
        base.task,
        kept,
        make_render_env=make_render_env,
        cameras=cameras,
        image_size=size,
        control_rate_hz=float(base.control_rate_hz),
    )
    result.last_shard = 0
    return result
