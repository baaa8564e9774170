"""Every loader rejects generated corruptions of its file cleanly (issue 41, promise 2).

Each on-disk input covered here is fed corruptions that hypothesis generates: truncation, bit
flips, and, for structured files, deleted and extra keys, values of the wrong type, NaN and
infinity, and absurd declared sizes. The promise: the loader either accepts the file or raises
an :class:`~embodied.errors.EmbodiedError` (the CLI's exit 2) whose message names the file;
never another exception (a traceback), never a hang, never a huge allocation.

Profiles: ``EMBODIED_FUZZ_PROFILE=ci`` (default, 20 cases per loader and corruption kind) and
``slow`` (200): ``EMBODIED_FUZZ_PROFILE=slow python -m pytest tests/core/test_core_fuzz_loaders.py``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from embodied.errors import EmbodiedError
from tests.conftest import require

hypothesis = require("hypothesis")
st = require("hypothesis.strategies")

HEALTH = [hypothesis.HealthCheck.function_scoped_fixture, hypothesis.HealthCheck.too_slow]
PROFILES = {
    # derandomized: CI sees the same cases every run; no example database in the work tree
    "ci": {"max_examples": 20, "derandomize": True},
    "slow": {"max_examples": 200},
}
PROFILE = os.environ.get("EMBODIED_FUZZ_PROFILE", "ci")
SETTINGS = hypothesis.settings(
    **PROFILES[PROFILE],
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=HEALTH,
)

ROOT = Path(__file__).resolve().parents[2]


# ---- corruptions -------------------------------------------------------------------------------
def truncations(data: bytes) -> Any:
    return st.integers(0, max(0, len(data) - 1)).map(lambda n: data[:n])


def bit_flips(data: bytes) -> Any:
    positions = st.lists(st.integers(0, len(data) * 8 - 1), min_size=1, max_size=8)

    def flip(bits: list[int]) -> bytes:
        out = bytearray(data)
        for b in bits:
            out[b // 8] ^= 1 << (b % 8)
        return bytes(out)

    return positions.map(flip)


BAD_VALUES = st.sampled_from(
    [
        None,
        True,
        "x",
        "",
        [],
        {},
        [1, "a"],
        {"k": 1},
        math.nan,
        math.inf,
        -math.inf,
        -1,
        0,
        2**40,
        1e308,
        -1e308,
    ]
)


def _paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += _paths(v, (*prefix, i))
    return out


def _set(tree: Any, path: tuple[Any, ...], value: Any, delete: bool = False) -> Any:
    if not path:
        return value
    tree = json.loads(json.dumps(tree))  # a deep copy (the trees are JSON-like)
    node = tree
    for key in path[:-1]:
        node = node[key]
    if delete:
        if isinstance(node, dict):
            node.pop(path[-1], None)
        else:
            node.pop(path[-1])
    else:
        node[path[-1]] = value
    return tree


def tree_edits(tree: Any) -> Any:
    """A value replaced (wrong type, NaN, inf, absurd), a key deleted, an extra key added."""
    paths = _paths(tree)
    replace = st.tuples(st.sampled_from(paths), BAD_VALUES).map(lambda pv: _set(tree, *pv))
    deletable = [p for p in paths if p]
    delete = st.sampled_from(deletable).map(lambda p: _set(tree, p, None, delete=True))
    dicts = [p for p in paths if isinstance(_get(tree, p), dict)]
    extra = st.tuples(st.sampled_from(dicts), BAD_VALUES).map(
        lambda pv: _set(tree, (*pv[0], "unexpected_key"), pv[1])
    )
    return st.one_of(replace, delete, extra)


def _get(tree: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def check(load: Callable[[], Any], names: str) -> None:
    """``load()`` succeeds or raises an EmbodiedError naming ``names`` (the file)."""
    try:
        load()
    except EmbodiedError as exc:
        assert names in str(exc), f"the error does not name {names!r}: {exc}"


# ---- robot config (YAML) -----------------------------------------------------------------------
def _robot_yaml() -> tuple[bytes, Any]:
    import yaml

    from hardware.configuration_robot import DEFAULT_CONFIG

    raw = Path(DEFAULT_CONFIG).read_bytes()
    return raw, yaml.safe_load(raw)


@pytest.mark.parametrize("kind", ["truncate", "flip", "edit"])
def test_robot_config_rejects_corruptions(
    kind: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import yaml

    from hardware.configuration_robot import load_robot_config

    raw, tree = _robot_yaml()
    strategy = {
        "truncate": truncations(raw),
        "flip": bit_flips(raw),
        "edit": tree_edits(tree).map(lambda t: yaml.safe_dump(t).encode()),
    }[kind]
    folder = tmp_path_factory.mktemp("robot")

    @SETTINGS
    @hypothesis.given(strategy)
    def run(data: bytes) -> None:
        path = folder / "robot.yaml"
        path.write_bytes(data)
        check(lambda: load_robot_config(path), "robot.yaml")

    run()


# ---- controller gains files (the tune page's presets) ------------------------------------------
@pytest.mark.parametrize("kind", ["truncate", "flip", "edit"])
def test_gains_file_rejects_corruptions(
    kind: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import yaml

    import controllers
    from controllers.pid import PIDConfig, PIDController

    folder = tmp_path_factory.mktemp("gains")
    good = folder / "good.yaml"
    controllers.save(
        PIDController(PIDConfig(kp=1.0, ki=20.0, output_min=-1.0, output_max=1.0)),
        good,
        meta={"concept": "ee_speed", "setpoint": 0.15, "knob": "alpha"},
    )
    raw = good.read_bytes()
    strategy = {
        "truncate": truncations(raw),
        "flip": bit_flips(raw),
        "edit": tree_edits(yaml.safe_load(raw)).map(lambda t: yaml.safe_dump(t).encode()),
    }[kind]

    @SETTINGS
    @hypothesis.given(strategy)
    def run(data: bytes) -> None:
        path = folder / "gains.yaml"
        path.write_bytes(data)
        check(lambda: controllers.load(path), "gains.yaml")

    run()


# ---- PDP checkpoints: config.json and the safetensors header -----------------------------------
@pytest.fixture(scope="module")
def pdp_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from embodied.apps.experiments.pdp import collect_demonstrations
    from policies.diffusion.training_pdp import train_pdp
    from tests.diffusion.conftest import tiny_config

    root = tmp_path_factory.mktemp("pdp")
    collect_demonstrations(2, seed=0, out_dir=root / "demos")
    train_pdp(root / "demos", root / "ckpt", tiny_config(steps=1, batch_size=4, z_dim=0),
              progress=False, tensorboard=False)  # fmt: skip
    return root / "ckpt"


def _load_policy(folder: Path) -> Any:
    import policies

    return policies.load(folder)


@pytest.mark.parametrize("kind", ["truncate", "flip", "edit"])
def test_pdp_config_json_rejects_corruptions(
    kind: str, pdp_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    raw = (pdp_checkpoint / "config.json").read_bytes()
    strategy = {
        "truncate": truncations(raw),
        "flip": bit_flips(raw),
        "edit": tree_edits(json.loads(raw)).map(lambda t: json.dumps(t).encode()),
    }[kind]
    folder = tmp_path_factory.mktemp("pdp_cfg") / "ckpt"
    shutil.copytree(pdp_checkpoint, folder)

    @SETTINGS
    @hypothesis.given(strategy)
    def run(data: bytes) -> None:
        (folder / "config.json").write_bytes(data)
        check(lambda: _load_policy(folder), str(folder))

    run()


def _safetensors_with_header(header: dict[str, Any], body: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


@pytest.mark.parametrize("kind", ["truncate", "flip", "header"])
def test_safetensors_rejects_corruptions_and_absurd_sizes(
    kind: str, pdp_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    raw = (pdp_checkpoint / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, body = json.loads(raw[8 : 8 + n]), raw[8 + n :]
    names = [k for k in header if k != "__metadata__"]

    def absurd(args: tuple[str, int]) -> bytes:
        name, which = args
        h = json.loads(json.dumps(header))
        if which == 0:  # 2^40 elements declared
            h[name]["shape"] = [2**20, 2**20]
        elif which == 1:  # offsets far past the file
            h[name]["data_offsets"] = [0, 2**40]
        elif which == 2:  # a dtype nobody has
            h[name]["dtype"] = "F128"
        else:  # a header length of 2^40 bytes
            return struct.pack("<Q", 2**40) + raw[8:]
        return _safetensors_with_header(h, body)

    strategy = {
        "truncate": truncations(raw),
        "flip": bit_flips(raw[: 8 + n]).map(lambda head: head + raw[8 + n :]),
        "header": st.tuples(st.sampled_from(names), st.integers(0, 3)).map(absurd),
    }[kind]
    folder = tmp_path_factory.mktemp("pdp_st") / "ckpt"
    shutil.copytree(pdp_checkpoint, folder)

    @SETTINGS
    @hypothesis.given(strategy)
    def run(data: bytes) -> None:
        (folder / "model.safetensors").write_bytes(data)
        check(lambda: _load_policy(folder), str(folder))

    run()


# ---- MCAP recordings (embodied datasets import) ------------------------------------------------
@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import policies
    import sim
    from embodied.loop import rollout
    from embodied.recording import McapRecorder

    env = sim.make("mujoco:reach_around")
    path = tmp_path_factory.mktemp("rec") / "session.mcap"
    with McapRecorder(path, env.describe()) as rec:
        rec.start_episode(seed=1)
        rollout(env, policies.load("expert", env=env), seed=1, callbacks=[rec], max_steps=15)
    return path


@pytest.mark.parametrize("kind", ["truncate", "flip"])
def test_mcap_import_rejects_corruptions(
    kind: str, recording: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from embodied.datasets.bags import import_bag

    raw = recording.read_bytes()
    strategy = {"truncate": truncations(raw), "flip": bit_flips(raw)}[kind]
    folder = tmp_path_factory.mktemp("mcap")
    counter = iter(range(10**6))

    @SETTINGS
    @hypothesis.given(strategy)
    def run(data: bytes) -> None:
        path = folder / "bad.mcap"
        path.write_bytes(data)
        out = folder / f"out{next(counter)}"
        check(lambda: import_bag(path, out), "bad.mcap")

    run()
