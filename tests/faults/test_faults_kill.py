"""Kill at any point, lose at most the open unit (issue 41, promise 1).

``embodied collect``, ``train pdp``, ``train minijudge``, ``eval`` and ``serve`` are killed
with SIGKILL (the whole process group) at times hypothesis generates, up to three times in a
row, then rerun with the same arguments (the trainers' own recovery: the same arguments plus
``--resume`` once a training state exists, which the plain rerun asks for). After each kill
every file the command left opens and validates; after the last rerun the result equals an
uninterrupted run's (collect: the same episodes, none twice; train: the same weights, bit for
bit; eval: the same outcomes, and no journaled episode run again; serve: the port is served
again) and no temporary file is left.

Profiles as in ``tests/core/test_core_fuzz_loaders.py``: ``EMBODIED_FUZZ_PROFILE=ci`` (default,
at least 20 kills per command) or ``slow`` (200):
``EMBODIED_FUZZ_PROFILE=slow python -m pytest tests/faults/test_faults_kill.py``. The counts
land in ``test-artifacts/reliability_kill.json`` (the reliability table of ``docs/reliability.md``).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from embodied.io import TEMP_NAME
from tests.conftest import ARTIFACTS, FUZZ_PROFILE, fuzz_settings, require

hypothesis = require("hypothesis")
st = require("hypothesis.strategies")

ROOT = Path(__file__).resolve().parents[2]
KILLS = {"ci": 20, "slow": 200}.get(FUZZ_PROFILE, 20)
"""Kills per command at least."""
KILLS_PER_CASE = 3
"""Kills in a row before the final rerun (the rerun of a killed run is killed again)."""
# a case draws 1-3 kills, some land after the end: the tally checks the kills
SETTINGS = fuzz_settings(ci=KILLS, slow=KILLS)
PRELOAD = [
    "torch",
    "mujoco",
    "h5py",
    "safetensors.torch",
    "embodied.apps.cli",
    "embodied.apps.collect",
    "embodied.apps.evaluation",
    "embodied.apps.serve",
    "embodied.apps.training.training_minijudge",
    "policies.diffusion.training_pdp",
    "sim",
    "transformers",  # the judge's frozen text tower (MiniLM, a BERT): 6 s to import
    "transformers.models.bert.modeling_bert",
    "transformers.models.bert.tokenization_bert",
    "embodied.rewards.minijudge",
]
TALLY: dict[str, dict[str, int]] = {}


# ---- the zygote: forks one command run per request ---------------------------------------------
class Zygote:
    """Client of ``tests/faults/zygote.py`` (a preloaded process forking command runs)."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("zygote.py")), *PRELOAD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )

    def _ask(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the zygote died"
        reply: dict[str, Any] = json.loads(line)
        return reply

    def start(self, argv: list[str], cwd: Path, log: Path) -> int:
        return int(self._ask({"op": "run", "argv": argv, "cwd": str(cwd), "log": str(log)})["pid"])

    def wait(self, pid: int) -> int:
        return int(self._ask({"op": "wait", "pid": pid})["code"])

    def run(self, argv: list[str], cwd: Path, log: Path) -> tuple[int, float]:
        t0 = time.perf_counter()
        code = self.wait(self.start(argv, cwd, log))
        return code, time.perf_counter() - t0

    def killed_after(self, argv: list[str], cwd: Path, log: Path, delay: float) -> bool:
        """Start ``argv``, SIGKILL its process group after ``delay`` s; True if it was still
        running (a kill), False if it had finished (its exit status must then be 0)."""
        pid = self.start(argv, cwd, log)
        time.sleep(delay)
        os.killpg(pid, signal.SIGKILL)  # a zombie until waited: the group still exists
        code = self.wait(pid)
        if code == -signal.SIGKILL:
            return True
        assert code == 0, f"{argv} exited {code}:\n{log.read_text()[-3000:]}"
        return False

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    try:
        yield z
    finally:
        z.close()


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    artifacts = ARTIFACTS
    artifacts.mkdir(parents=True, exist_ok=True)
    path = artifacts / "reliability_kill.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**old, **TALLY, "profile": FUZZ_PROFILE}, indent=2) + "\n")


# ---- scenarios -----------------------------------------------------------------------------------
@dataclass
class Scenario:
    """One command under kills.

    Attributes:
        name: Table row.
        argv: The command's arguments, given its work folder.
        validate: Checks every file in the work folder opens (after a kill and at the end).
        compare: Checks the finished work folder against the uninterrupted reference's;
            returns the data lost (units the reference has and the rerun lacks).
        setup: Prepares a fresh work folder (inputs copied in).
        resume_flag: Added on reruns once ``resume_file`` exists (the trainers).
        resume_file: The training state that makes a rerun a resume.
    """

    name: str
    argv: Callable[[Path], list[str]]
    validate: Callable[[Path], None]
    compare: Callable[[Path, Path], int]
    setup: Callable[[Path], None] = lambda work: None
    resume_flag: str | None = None
    resume_file: str | None = None
    reference: Path | None = None
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)

    def rerun_argv(self, work: Path) -> list[str]:
        argv = self.argv(work)
        if self.resume_flag and self.resume_file and (work / self.resume_file).exists():
            argv.append(self.resume_flag)
        return argv


def _words(command: str) -> list[str]:
    return shlex.split(command)


def _no_temps(work: Path) -> None:
    left = [p for p in work.rglob("*") if TEMP_NAME.match(p.name)]
    assert not left, f"temporary files left behind: {left}"


def _check_case(z: Zygote, sc: Scenario, work: Path, fractions: list[float]) -> dict[str, int]:
    """Kill ``sc`` at ``fractions`` of its uninterrupted time, rerun it to the end, check."""
    assert sc.reference is not None
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sc.setup(work)
    kills = temps = 0
    finished = False
    for i, f in enumerate(fractions):
        argv = sc.argv(work) if i == 0 else sc.rerun_argv(work)
        if not z.killed_after(argv, work, work.parent / f"{work.name}.kill{i}.log", f * sc.seconds):
            if i == 0:
                # a fresh run ended before f of the reference time: the machine got faster
                # than when the reference was timed (a shared machine's load changes), so
                # later kills are timed on what this run showed
                sc.seconds = min(sc.seconds, f * sc.seconds)
            finished = True  # it ran to its end before the kill: nothing to recover
            break
        kills += 1
        temps += sum(1 for p in work.rglob("*") if TEMP_NAME.match(p.name))
        sc.validate(work)
    if not finished:
        _rerun_to_end(z, sc, work)
    sc.validate(work)
    _no_temps(work)
    lost = sc.compare(work, sc.reference)
    assert lost == 0, f"{sc.name}: {lost} units lost"
    return {"kills": kills, "temps_removed": temps, "data_lost": lost}


def _rerun_to_end(z: Zygote, sc: Scenario, work: Path) -> None:
    if sc.resume_flag and (work / str(sc.resume_file)).exists():
        # the plain rerun refuses to train over the run and names the fix
        log = work.parent / f"{work.name}.plain.log"
        code, _ = z.run(sc.argv(work), work, log)
        assert code == 2 and sc.resume_flag in log.read_text(), log.read_text()[-2000:]
    log = work.parent / f"{work.name}.final.log"
    code, _ = z.run(sc.rerun_argv(work), work, log)
    assert code == 0, log.read_text()[-3000:]


def _run_scenario(
    z: Zygote, sc: Scenario, tmp: Path, fractions: list[float], counter: dict[str, int]
) -> None:
    if sc.reference is None:
        ref = tmp / "reference"
        times = []
        for i in range(2):  # the first run also loads what the zygote did not preload
            shutil.rmtree(ref, ignore_errors=True)
            ref.mkdir(parents=True)
            sc.setup(ref)
            code, seconds = z.run(sc.argv(ref), ref, tmp / f"reference{i}.log")
            assert code == 0, (tmp / f"reference{i}.log").read_text()[-3000:]
            times.append(seconds)
        sc.reference, sc.seconds = ref, min(times)
        sc.validate(ref)
    n = counter.setdefault("cases", 0)
    counter["cases"] = n + 1
    out = _check_case(z, sc, tmp / f"case{n}", fractions)
    for k, v in out.items():
        counter[k] = counter.get(k, 0) + v
    counter["survived"] = counter.get("survived", 0) + 1


FRACTIONS = st.lists(st.floats(0.0, 0.9), min_size=1, max_size=KILLS_PER_CASE)
"""Kill times as fractions of the command's uninterrupted wall time (startup included; a
resumed run is shorter, so some kills land after its end and count as no kill)."""


def _tally(name: str) -> dict[str, int]:
    return TALLY.setdefault(name, {"cases": 0, "kills": 0, "survived": 0, "data_lost": 0})


def _assert_enough(name: str) -> None:
    kills = TALLY[name]["kills"]
    assert kills >= KILLS, f"{name}: only {kills} kills landed while the command ran"


# ---- collect -------------------------------------------------------------------------------------
def _collect_validate(work: Path) -> None:
    from embodied.datasets import Dataset

    out = work / "d"
    if not any(out.glob("episode_*.hdf5")):
        return
    seeds = [ep.attrs["meta"]["seed"] for ep in Dataset(out)]
    assert len(seeds) == len(set(seeds)), f"duplicated episodes: {seeds}"
    assert seeds == sorted(seeds)
    if (out / "collect.json").exists():
        json.loads((out / "collect.json").read_text())


def _collect_compare(work: Path, ref: Path) -> int:
    from embodied.datasets import Dataset

    got, want = Dataset(work / "d"), Dataset(ref / "d")
    by_seed = {ep.attrs["meta"]["seed"]: ep for ep in got}
    lost = 0
    for ep in want:
        mine = by_seed.get(ep.attrs["meta"]["seed"])
        if mine is None:
            lost += 1
            continue
        np.testing.assert_array_equal(mine.actions, ep.actions)
    assert len(got) == len(want), f"{len(got)} episodes, an uninterrupted run has {len(want)}"
    return lost


COLLECT = Scenario(
    "embodied collect",
    argv=lambda w: _words("collect --env mujoco:reach_around --episodes 8 --out d"),
    validate=_collect_validate,
    compare=_collect_compare,
)


@SETTINGS
@hypothesis.given(fractions=FRACTIONS)
def test_collect_killed_at_generated_times(
    zygote: Zygote, tmp_path_factory: pytest.TempPathFactory, fractions: list[float]
) -> None:
    tmp = _scenario_dir(tmp_path_factory, "collect")
    _run_scenario(zygote, COLLECT, tmp, fractions, _tally(COLLECT.name))


def test_collect_kills_counted() -> None:
    _assert_enough(COLLECT.name)


_DIRS: dict[str, Path] = {}


def _scenario_dir(factory: pytest.TempPathFactory, name: str) -> Path:
    if name not in _DIRS:
        _DIRS[name] = factory.mktemp(f"kill_{name}")
    return _DIRS[name]


@pytest.fixture(scope="module")
def reach_data(zygote: Zygote, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight reach_around expert episodes to train on."""
    root = tmp_path_factory.mktemp("kill_data")
    code, _ = zygote.run(COLLECT.argv(root), root, root / "collect.log")
    assert code == 0, (root / "collect.log").read_text()[-2000:]
    return root / "d"


# ---- train pdp -------------------------------------------------------------------------------------
def _tensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path))


def _same_weights(a: Path, b: Path) -> None:
    x, y = _tensors(a), _tensors(b)
    assert x.keys() == y.keys()
    for k in x:
        np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def _train_state_opens(out: Path, what: str) -> int:
    """The training state (if any) and its tensors open; returns its step (-1: none)."""
    state = out / "train_state.json"
    if not state.exists():
        return -1
    meta = json.loads(state.read_text())
    _tensors(out / meta["tensors"])
    return int(meta["step"])


def _pdp_validate(work: Path) -> None:
    from policies.diffusion.policy_pdp import load_model

    out = work / "run"
    step = _train_state_opens(out, "PDP")
    if (out / "model.safetensors").exists():
        load_model(out)  # config.json + weights
    if step >= 0:
        assert step % 5 == 0 or step == 30, step
    for snap in (out / "snapshots").glob("step_*") if (out / "snapshots").exists() else []:
        load_model(snap)


def _pdp_compare(work: Path, ref: Path) -> int:
    _same_weights(work / "run" / "model.safetensors", ref / "run" / "model.safetensors")
    state, ref_state = (
        json.loads((w / "run" / "train_state.json").read_text()) for w in (work, ref)
    )
    assert state["step"] == ref_state["step"] == 30
    _same_weights(work / "run" / state["tensors"], ref / "run" / ref_state["tensors"])
    return 0


TRAIN_PDP = Scenario(
    "embodied train pdp",
    argv=lambda w: _words(
        f"train pdp --data {_DATA['reach']} --out run --steps 30 --checkpoint-every 5 "
        "--batch-size 8 --hidden-dim 32 --z-dim 0 --horizon 8 --n-action-steps 4 --threads 1 "
        "--no-progress"
    ),
    validate=_pdp_validate,
    compare=_pdp_compare,
    resume_flag="--resume",
    resume_file="run/train_state.json",
)
_DATA: dict[str, Path] = {}


@SETTINGS
@hypothesis.given(fractions=FRACTIONS)
def test_train_pdp_killed_at_generated_times(
    zygote: Zygote,
    reach_data: Path,
    tmp_path_factory: pytest.TempPathFactory,
    fractions: list[float],
) -> None:
    _DATA["reach"] = reach_data
    tmp = _scenario_dir(tmp_path_factory, "train_pdp")
    _run_scenario(zygote, TRAIN_PDP, tmp, fractions, _tally(TRAIN_PDP.name))


def test_train_pdp_kills_counted() -> None:
    _assert_enough(TRAIN_PDP.name)


# ---- train minijudge ---------------------------------------------------------------------------------
def _judge_validate(work: Path) -> None:
    from embodied.rewards.minijudge import MiniJudge

    out = work / "judge"
    _train_state_opens(out, "judge")
    if (out / "calibration.json").exists():  # written last: the checkpoint is complete
        MiniJudge.from_pretrained(out, device="cpu")


def _judge_compare(work: Path, ref: Path) -> int:
    _same_weights(work / "judge" / "model.safetensors", ref / "judge" / "model.safetensors")
    got, want = (json.loads((w / "judge" / "calibration.json").read_text()) for w in (work, ref))
    assert got["threshold"] == want["threshold"]
    assert got["oracle_agreement"] == want["oracle_agreement"]
    return 0


def _judge_setup(work: Path) -> None:
    shutil.copytree(_DATA["judge_cache"], work / "cache")


TRAIN_JUDGE = Scenario(
    "embodied train minijudge",
    argv=lambda w: _words(
        "train minijudge --out judge --steps 12 --checkpoint-every 3 --n-arm 2 --n-ball 2 "
        "--n-val 2 --n-wrong-val 1 --extra-arm-experts 0 --image-size 32 --batch 8 --cache cache"
    ),
    validate=_judge_validate,
    compare=_judge_compare,
    setup=_judge_setup,
    resume_flag="--resume",
    resume_file="judge/train_state.json",
)


@pytest.fixture(scope="module")
def judge_cache(zygote: Zygote, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The judge's recorded episodes (the training reads them from its cache, as reruns do)."""
    root = tmp_path_factory.mktemp("kill_judge_cache")
    code, _ = zygote.run(TRAIN_JUDGE.argv(root), root, root / "judge.log")
    assert code == 0, (root / "judge.log").read_text()[-2000:]
    return root / "cache"


@SETTINGS
@hypothesis.given(fractions=FRACTIONS)
def test_train_minijudge_killed_at_generated_times(
    zygote: Zygote,
    judge_cache: Path,
    tmp_path_factory: pytest.TempPathFactory,
    fractions: list[float],
) -> None:
    _DATA["judge_cache"] = judge_cache
    tmp = _scenario_dir(tmp_path_factory, "train_minijudge")
    _run_scenario(zygote, TRAIN_JUDGE, tmp, fractions, _tally(TRAIN_JUDGE.name))


def test_train_minijudge_kills_counted() -> None:
    _assert_enough(TRAIN_JUDGE.name)


# ---- eval ----------------------------------------------------------------------------------------------
def _journal(out: Path) -> list[dict[str, Any]]:
    """The journal's complete lines (a torn last line is what a kill may leave)."""
    path = out / "episodes.jsonl"
    if not path.exists():
        return []
    complete = path.read_bytes().rpartition(b"\n")[0]
    lines = [json.loads(x) for x in complete.split(b"\n")] if complete else []
    assert not lines or lines[0].get("journal") == 1, lines[:1]
    return lines[1:]


def _eval_validate(work: Path) -> None:
    out = work / "e"
    records = _journal(out)
    indices = [r["spec"]["index"] for r in records]
    assert len(indices) == len(set(indices)), f"an episode journaled twice: {indices}"
    for name in ("preflight.json", "results.json"):
        if (out / name).exists():
            json.loads((out / name).read_text())
    _EVAL_SEEN.setdefault(str(work), {}).update(
        {r["spec"]["index"]: (r["worker"], r["duration_s"]) for r in records}
    )


def _eval_compare(work: Path, ref: Path) -> int:
    got, want = (json.loads((w / "e" / "results.json").read_text()) for w in (work, ref))
    keys = ("success", "steps", "reward_sum", "reason")
    assert [{k: e[k] for k in keys} for e in got["episodes"]] == [
        {k: e[k] for k in keys} for e in want["episodes"]
    ]
    # an episode journaled before a kill was kept, not run again (same worker and duration)
    for index, seen in _EVAL_SEEN.pop(str(work), {}).items():
        final = got["episodes"][index]
        assert (final["worker"], final["duration_s"]) == seen, f"episode {index} ran again"
    return 0


_EVAL_SEEN: dict[str, dict[int, tuple[int, float]]] = {}
EVAL = Scenario(
    "embodied eval",
    argv=lambda w: _words(
        "eval --env mujoco:reach_around --policy expert --episodes 8 --workers 0 --out e --json"
    ),
    validate=_eval_validate,
    compare=_eval_compare,
)


@SETTINGS
@hypothesis.given(fractions=FRACTIONS)
def test_eval_killed_at_generated_times(
    zygote: Zygote, tmp_path_factory: pytest.TempPathFactory, fractions: list[float]
) -> None:
    tmp = _scenario_dir(tmp_path_factory, "eval")
    _run_scenario(zygote, EVAL, tmp, fractions, _tally(EVAL.name))


def test_eval_kills_counted() -> None:
    _assert_enough(EVAL.name)


# ---- serve -----------------------------------------------------------------------------------------
def _connect(url: str, deadline_s: float = 60.0) -> Any:
    from policies.remote import RemotePolicy, RemotePolicyError

    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return RemotePolicy(url, timeout_s=10.0, reconnects=50)
        except RemotePolicyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture(scope="module")
def serve_setup(
    zygote: Zygote, reach_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """A tiny PDP trained on the reach data, its serve command, how long it takes to serve
    its first answer, and the episode it acts in process."""
    import policies
    import sim
    from embodied.io import free_port
    from embodied.loop import rollout

    root = tmp_path_factory.mktemp("kill_serve_policy")
    argv = _words(f"train pdp --data {reach_data} --out pdp --steps 3 --z-dim 0 --no-progress")
    code, _ = zygote.run(argv, root, root / "train.log")
    assert code == 0, (root / "train.log").read_text()[-2000:]
    port = free_port()
    setup: dict[str, Any] = {"port": port, "url": f"ws://127.0.0.1:{port}"}
    setup["argv"] = _words(f"serve --policy {root / 'pdp'} --port {port}")
    t0 = time.perf_counter()
    pid = zygote.start(setup["argv"], root, root / "reference.log")
    try:
        _connect(setup["url"]).close()
    finally:
        setup["startup_s"] = time.perf_counter() - t0
        os.killpg(pid, signal.SIGTERM)
        assert zygote.wait(pid) in (0, -signal.SIGTERM)
    env = sim.make("mujoco:reach_around")
    setup["env"], setup["env2"] = env, sim.make("mujoco:reach_around")
    setup["expected"] = rollout(env, policies.load(root / "pdp"), seed=5, max_steps=25)
    return setup


@SETTINGS
@hypothesis.given(fractions=FRACTIONS)
def test_serve_killed_at_generated_times(
    zygote: Zygote,
    serve_setup: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
    fractions: list[float],
) -> None:
    """``embodied serve`` SIGKILLed while starting or while a client's episode runs, then
    started again on the same port: a client that was connected to a killed server reconnects,
    and its episode, like a new client's, equals the in-process policy's action for action."""
    from embodied.loop import rollout
    from policies.remote import RemotePolicyError

    setup = serve_setup
    tmp = _scenario_dir(tmp_path_factory, "serve")
    tally = _tally("embodied serve")
    env, url = setup["env"], setup["url"]
    n = tally["cases"]
    tally["cases"] += 1
    survivor = None  # connected to a server that is then killed; must reconnect at the end
    for i, f in enumerate(fractions):
        log = tmp / f"case{n}.kill{i}.log"
        pid = zygote.start(setup["argv"], tmp, log)
        if f < 0.45:  # while it starts
            time.sleep(f / 0.45 * setup["startup_s"])
        else:  # while a client's episode runs
            client = _connect(url)
            survivor = survivor or _connect(url)
            errors: list[BaseException] = []
            client.reconnects = 2

            def episode(client: Any = client, errors: list[BaseException] = errors) -> None:
                try:
                    rollout(setup["env2"], client, seed=5, max_steps=2000)
                except RemotePolicyError as exc:
                    errors.append(exc)

            thread = threading.Thread(target=episode)
            thread.start()
            time.sleep((f - 0.45) / 0.45 * 0.5)  # up to 0.5 s into the episode
        os.killpg(pid, signal.SIGKILL)
        assert zygote.wait(pid) == -signal.SIGKILL, log.read_text()[-2000:]
        tally["kills"] += 1
        if f >= 0.45:
            thread.join(timeout=60)
            assert not thread.is_alive(), "a client hung on a killed server"
            if errors:  # the episode outlived the server: the error names it and the fix
                assert f"127.0.0.1:{setup['port']}" in str(errors[0]) and "fix" in str(errors[0])
            client.close()
    pid = zygote.start(setup["argv"], tmp, tmp / f"case{n}.final.log")
    try:
        for client in [_connect(url), *([survivor] if survivor else [])]:
            episode = rollout(env, client, seed=5, max_steps=25)
            np.testing.assert_allclose(episode.actions, setup["expected"].actions, atol=1e-12)
            client.close()
    finally:
        os.killpg(pid, signal.SIGTERM)
        assert zygote.wait(pid) in (0, -signal.SIGTERM)
    assert not [p for p in tmp.rglob("*") if TEMP_NAME.match(p.name)]
    tally["survived"] += 1


def test_serve_kills_counted() -> None:
    _assert_enough("embodied serve")
