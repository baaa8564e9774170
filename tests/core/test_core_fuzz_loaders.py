"""Every loader rejects generated corruptions of its file cleanly (issue 41, promise 2).

Each on-disk input covered here is fed corruptions that hypothesis generates: truncation, bit
flips, and, for structured files, deleted and extra keys, values of the wrong type, NaN and
infinity, and absurd declared sizes. The promise: the loader either accepts the file or raises
an :class:`~embodied.errors.EmbodiedError` (the CLI's exit 2) whose message names the file;
never another exception (a traceback), never a hang, never a huge allocation.

Inputs: the robot YAML, controller gains files (also as the tune page and ``embodied deploy``
load them), PDP config.json and weights, MCAP recordings, ``embodied collect`` HDF5 shards and
LIBERO demonstration files (also h5py-level edits), LeRobotDataset v3 exports (JSON metadata,
parquet tables, extras archive, video), the minijudge's calibration.json, robust shields,
OpenVLA steering directions and Demo2Reward instruction files. Each shrunk failing case the
fuzzer found is kept as a plain regression test next to its loader's fuzz test.

Profiles: ``EMBODIED_FUZZ_PROFILE=ci`` (default, 20 cases per loader and corruption kind) and
``slow`` (200): ``EMBODIED_FUZZ_PROFILE=slow python -m pytest tests/core/test_core_fuzz_loaders.py``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from embodied.errors import EmbodiedError
from tests.conftest import ARTIFACTS, FUZZ_PROFILE, fuzz_settings, require

hypothesis = require("hypothesis")
st = require("hypothesis.strategies")

SETTINGS = fuzz_settings(ci=20, slow=200)

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


TALLY: dict[str, dict[str, int]] = {}
"""Per fuzz test: loads of a generated file, accepted and refused (an EmbodiedError naming the
file); anything else fails the test. Written to ``test-artifacts/reliability_loaders.json``."""


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "reliability_loaders.json").write_text(
        json.dumps({**TALLY, "profile": FUZZ_PROFILE}, indent=2) + "\n"
    )


def check(load: Callable[[], Any], names: str) -> None:
    """``load()`` succeeds or raises an EmbodiedError naming ``names`` (the file)."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[-1].split("[")[0].split(" ")[0]
    row = TALLY.setdefault(test, {"loads": 0, "accepted": 0, "refused": 0})
    row["loads"] += 1
    try:
        load()
    except EmbodiedError as exc:
        assert names in str(exc), f"the error does not name {names!r}: {exc}"
        row["refused"] += 1
    else:
        row["accepted"] += 1


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
    from embodied.apps.route_task import collect_demonstrations
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


CHECKPOINT_JSON = [
    ("rl", "config.json"),
    ("minijudge", "config.json"),
    ("contrastive", "config.json"),
    ("generative", "config.json"),
    ("openvla", "config.json"),
    ("pdp_latents", "train_state.json"),
    ("dataset_writer", "meta.json"),
]
"""(loader of tests/core/test_core_loaders.py, JSON file it reads): the JSON of every other
checkpoint kind (RL controller, the three judge kinds, OpenVLA, PDP train state, dataset)."""


@pytest.mark.parametrize("kind", ["truncate", "flip", "edit"])
@pytest.mark.parametrize(("loader", "name"), CHECKPOINT_JSON)
def test_checkpoint_json_of_every_kind_rejects_corruptions(
    loader: str,
    name: str,
    kind: str,
    pristine: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from tests.core.test_core_loaders import LOADERS

    source, load, _ = LOADERS[loader]
    folder = tmp_path_factory.mktemp(f"{loader}_json") / source
    shutil.copytree(pristine(source), folder)
    raw = (folder / name).read_bytes()

    @SETTINGS
    @hypothesis.given(_json_strategy(kind, raw))
    def run(data: bytes) -> None:
        (folder / name).write_bytes(data)
        check(lambda: load(folder), name)

    run()


def _set_everywhere(tree: Any, key: str, value: Any) -> int:
    """Set every ``key`` in the JSON tree ``tree`` (in place) to ``value``; how many were set."""
    n = 0
    if isinstance(tree, dict):
        for k in list(tree):
            if k == key:
                tree[k] = value
                n += 1
            else:
                n += _set_everywhere(tree[k], key, value)
    elif isinstance(tree, list):
        n = sum(_set_everywhere(v, key, value) for v in tree)
    return n


# shrunk cases the checkpoint JSON fuzzing found, kept as regression tests
REGRESSIONS = [
    pytest.param("minijudge", "config.json", "text_model", "", "text_model", id="judge-empty-text"),
    pytest.param("minijudge", "config.json", "text_model", "x", "text_model", id="judge-no-pkg"),
    # a module a file names is never imported (only known text-encoder packages are)
    pytest.param(
        "minijudge", "config.json", "text_model", "json", "text-encoder package", id="judge-module"
    ),
    pytest.param("minijudge", "config.json", "image_hidden", True, "image_hidden", id="judge-bool"),
    pytest.param("minijudge", "config.json", "channels", [2**16] * 4, "declares", id="judge-huge"),
    pytest.param("contrastive", "config.json", "hidden_size", 2**40, "config.json", id="clip-huge"),
    pytest.param(
        "contrastive", "config.json", "max_position_embeddings", 2**40, "config.json",
        id="clip-huge-table",
    ),
    pytest.param("openvla", "config.json", "q01", ["x"] * 7, "q01", id="vla-stats"),
    pytest.param(
        "openvla", "config.json", "num_attention_heads", True, "config.json", id="vla-bool"
    ),
    pytest.param("openvla", "config.json", "policy_type", "x", "policy_type", id="vla-type"),
    # building a model loops over its layers: a count of 10^12 hung the loader (slow profile)
    pytest.param(
        "generative", "config.json", "num_hidden_layers", 10**12, "beyond any model",
        id="vlm-layers",
    ),
    pytest.param(
        "openvla", "config.json", "num_hidden_layers", 10**12, "beyond any model", id="vla-layers"
    ),
    pytest.param("rl", "config.json", "obs_names", None, "observations", id="rl-obs-null"),
    pytest.param("rl", "config.json", "meta", True, "'meta'", id="rl-meta-bool"),
    pytest.param("pdp_latents", "train_state.json", "tensors", "u.safetensors", "u.safetensors",
                 id="pdp-pointer"),
    # found by the slow profile: a nested config given null, sizes a model divides by, and
    # layer counts the weights beside config.json do not have
    pytest.param("pdp", "config.json", "vision", None, "vision", id="pdp-vision-null"),
    pytest.param("contrastive", "config.json", "hidden_size", 0, "config.json", id="clip-width-0"),
    pytest.param("generative", "config.json", "num_key_value_heads", 0, "config.json",
                 id="vlm-kv-heads-0"),
    pytest.param("generative", "config.json", "num_attention_heads", 0, "config.json",
                 id="vlm-heads-0"),
    pytest.param("openvla", "config.json", "num_hidden_layers", 5, "does not describe the weights",
                 id="vla-more-layers"),
    pytest.param("openvla", "config.json", "norm_stats", {}, "norm_stats", id="vla-no-stats"),
]  # fmt: skip


@pytest.mark.parametrize(("loader", "name", "key", "value", "says"), REGRESSIONS)
def test_checkpoint_json_regressions(
    loader: str,
    name: str,
    key: str,
    value: Any,
    says: str,
    pristine: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    from tests.core.test_core_loaders import LOADERS

    source, load, _ = LOADERS[loader]
    folder = tmp_path / source
    shutil.copytree(pristine(source), folder)
    tree = json.loads((folder / name).read_text())
    assert _set_everywhere(tree, key, value), f"{name} of {loader} has no {key!r}"
    (folder / name).write_text(json.dumps(tree))
    with pytest.raises(EmbodiedError) as info:
        load(folder)
    assert name in str(info.value) and says in str(info.value), str(info.value)


def _safetensors_with_header(header: dict[str, Any], body: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


def safetensors_corruptions(kind: str, raw: bytes) -> Any:
    """Truncations, header bit flips, or absurd header values of the safetensors file ``raw``."""
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

    return {
        "truncate": truncations(raw),
        "flip": bit_flips(raw[: 8 + n]).map(lambda head: head + raw[8 + n :]),
        "header": st.tuples(st.sampled_from(names), st.integers(0, 3)).map(absurd),
    }[kind]


@pytest.mark.parametrize("kind", ["truncate", "flip", "header"])
def test_safetensors_rejects_corruptions_and_absurd_sizes(
    kind: str, pdp_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    raw = (pdp_checkpoint / "model.safetensors").read_bytes()
    strategy = safetensors_corruptions(kind, raw)
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


# ---- HDF5 datasets: `embodied collect` shards and LIBERO demonstration files -------------------
# Besides truncation and bit flips, an HDF5 file is edited the way h5py sees it: a group,
# dataset or attribute deleted, replaced (wrong type, NaN/inf, wrong shape, a group for a
# dataset) or added (an extra key, an extra empty episode).

H5_BAD_VALUES = [
    "x",
    "",
    "{",
    "[1, 2]",
    "null",
    '{"k": 1}',
    b"\xff\xfe",
    -1,
    0,
    2**40,
    math.nan,
    math.inf,
    [1.0, 2.0],
    "empty",  # stands for h5py.Empty (an attribute without a value)
]
H5_DATASET_EDITS = [
    "delete",
    "nan",
    "inf",
    "scalar",
    "flat",
    "empty",
    "string",
    "group",
    "extra_row",
    "extra_axis",
]
H5_GROUP_EDITS = ["delete", "dataset", "extra_dataset", "extra_group"]


def _h5_nodes(path: Path) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """The file's datasets, groups (the root included) and (object, attribute) pairs."""
    import h5py

    datasets: list[str] = []
    groups: list[str] = ["/"]
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda name, node: (datasets if isinstance(node, h5py.Dataset) else groups).append(name)
        )
        attrs = [(obj, key) for obj in groups + datasets for key in f[obj].attrs]
    return datasets, groups, attrs


def h5_edits(path: Path) -> Any:
    """One h5py-level edit of the file at ``path``, as a tuple :func:`_apply_h5_edit` runs."""
    datasets, groups, attrs = _h5_nodes(path)
    values = st.sampled_from(H5_BAD_VALUES)
    return st.one_of(
        st.tuples(st.just("dataset"), st.sampled_from(datasets), st.sampled_from(H5_DATASET_EDITS)),
        st.tuples(st.just("group"), st.sampled_from(groups[1:]), st.sampled_from(H5_GROUP_EDITS)),
        st.tuples(st.just("attr"), st.sampled_from(attrs), values),
        st.tuples(st.just("delattr"), st.sampled_from(attrs), st.just(None)),
        st.tuples(st.just("newattr"), st.sampled_from(groups), values),
    )


def _h5_value(value: Any) -> Any:
    """``value`` as h5py stores it as an attribute."""
    import h5py
    import numpy as np

    if value == "empty":
        return h5py.Empty("f8")
    return np.asarray(value) if isinstance(value, list) else value


def _apply_h5_edit(path: Path, edit: tuple[str, Any, Any]) -> None:
    """Apply an edit drawn by :func:`h5_edits` to the file at ``path`` in place."""
    import h5py
    import numpy as np

    kind, where, how = edit
    with h5py.File(path, "a") as f:
        if kind in ("attr", "delattr"):
            obj, key = where
            if kind == "delattr":
                del f[obj].attrs[key]
            else:
                f[obj].attrs[key] = _h5_value(how)
        elif kind == "newattr":
            f[where].attrs["unexpected_key"] = _h5_value(how)
        elif kind == "group":
            if how in ("delete", "dataset"):
                del f[where]
            if how == "dataset":
                f[where] = np.zeros(3)
            elif how == "extra_dataset":
                f[where]["unexpected_key"] = np.zeros(3)
            elif how == "extra_group":
                f[where].create_group("demo_9")  # an episode without obs or actions
        else:
            old = f[where][()]
            del f[where]
            if how == "delete":
                return
            arr = np.asarray(old)
            new: Any = {
                "nan": np.full(arr.shape, np.nan),
                "inf": np.full(arr.shape, np.inf),
                "scalar": np.float64(0.5),
                "flat": arr.reshape(-1),
                "empty": arr[:0],
                "string": np.array([b"x"] * max(1, arr.shape[0] if arr.ndim else 1)),
                "extra_row": np.concatenate([arr, arr[:1]]) if arr.ndim else arr,
                "extra_axis": arr[..., None],
            }.get(how)
            if how == "group":
                f.create_group(where)
            else:
                f[where] = new


def _fuzz_file_strategy(kind: str, raw: bytes, path: Path) -> Any:
    """Truncations, bit flips or h5py edits of the HDF5 file ``raw`` (written at ``path``)."""
    if kind == "truncate":
        return truncations(raw)
    if kind == "flip":
        return bit_flips(raw)
    return h5_edits(path)


def _write_fuzzed_h5(kind: str, raw: bytes, path: Path, drawn: Any) -> None:
    """Write the drawn bytes, or the pristine file with the drawn h5py edit applied."""
    if kind == "edit":
        path.write_bytes(raw)
        _apply_h5_edit(path, drawn)
    else:
        path.write_bytes(drawn)


@pytest.fixture(scope="module")
def shard_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset folder with one tiny shard (a state and a camera) written by DatasetWriter."""
    import numpy as np

    from embodied.datasets import DatasetWriter, EpisodeData

    rng = np.random.default_rng(0)
    t = 6
    dones = np.zeros(t, dtype=np.uint8)
    dones[-1] = 1
    episode = EpisodeData(
        obs={
            "state": rng.standard_normal((t, 4)).astype(np.float32),
            "image.agentview": rng.integers(0, 255, (t, 8, 8, 3), dtype=np.uint8),
        },
        actions=rng.standard_normal((t, 2)),
        rewards=np.zeros(t),
        dones=dones,
        attrs={
            "instruction": "reach the goal",
            "success": True,
            "success_step": t - 1,
            "judge_score": -1.0,
            "meta": json.dumps({"route": "left", "control_rate_hz": 20.0}),
        },
        extras={"measurements": np.zeros(t), "setpoints": np.zeros(t)},
    )
    root = tmp_path_factory.mktemp("shards") / "demos"
    DatasetWriter(root, env_args={"env_id": "mujoco:reach_around", "control_rate_hz": 20.0}).add(
        episode
    )
    return root


def _read_dataset(path: Path) -> None:
    """Every episode of the dataset at ``path``, as `embodied datasets export` reads them."""
    from embodied.datasets import open_dataset

    list(open_dataset(path))


def _train_demonstrations(path: Path) -> None:
    """The demonstrations `embodied train pdp` trains on (state and one camera)."""
    from policies.diffusion.processor_pdp import load_demonstrations

    load_demonstrations(path, cameras=("agentview",))


@pytest.mark.parametrize("kind", ["truncate", "flip", "edit"])
def test_dataset_shard_rejects_corruptions(
    kind: str, shard_folder: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from embodied.apps.collect import _shard_metas

    raw = (shard_folder / "episode_000000.hdf5").read_bytes()
    folder = tmp_path_factory.mktemp("shard_fuzz") / "demos"
    shutil.copytree(shard_folder, folder)
    shard = folder / "episode_000000.hdf5"

    @SETTINGS
    @hypothesis.given(_fuzz_file_strategy(kind, raw, shard))
    def run(drawn: Any) -> None:
        _write_fuzzed_h5(kind, raw, shard, drawn)
        check(lambda: _read_dataset(folder), shard.name)
        # the trainer may name the folder ("no successful demonstrations in ...")
        check(lambda: _train_demonstrations(folder), str(folder))
        # a rerun of `embodied collect` counts the episodes already there: a damaged shard
        # counts none (Dataset reports it); raising or hanging here would stop the rerun
        list(_shard_metas(folder))

    run()


LIBERO_BDDL = "KITCHEN_SCENE1_put_the_black_bowl_on_the_plate.bddl"


@pytest.fixture(scope="module")
def libero_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny file in the layout ``write_demo_file`` (sim/libero/recording.py) writes."""
    import h5py
    import numpy as np

    rng = np.random.default_rng(0)
    t = 5
    path = tmp_path_factory.mktemp("libero") / "put_the_black_bowl_on_the_plate_demo.hdf5"
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_name"] = "Libero_Tabletop_Manipulation"
        data.attrs["problem_info"] = json.dumps(
            {
                "problem_name": "libero_tabletop_manipulation",
                "domain_name": "robosuite",
                "language_instruction": "put the black bowl on the plate",
            }
        )
        data.attrs["macros_image_convention"] = "opengl"
        data.attrs["bddl_file_name"] = f"libero/bddl_files/libero_spatial/{LIBERO_BDDL}"
        data.attrs["bddl_file_content"] = "(define (problem LIBERO_Tabletop_Manipulation))"
        data.attrs["env_args"] = json.dumps(
            {"type": 1, "env_name": "Libero_Tabletop_Manipulation", "env_kwargs": {}}
        )
        data.attrs["embodied_obs_alignment"] = "before_action"
        data.attrs["embodied_task"] = "libero_spatial:put_the_black_bowl_on_the_plate"
        data.attrs["num_demos"] = 1
        data.attrs["total"] = t
        demo = data.create_group("demo_0")
        obs = demo.create_group("obs")
        for cam in ("agentview_rgb", "eye_in_hand_rgb"):
            frames = rng.integers(0, 255, (t, 8, 8, 3), dtype=np.uint8)
            obs.create_dataset(cam, data=frames, compression="gzip")
        for key, dim in (("ee_pos", 3), ("ee_ori", 3), ("ee_states", 6), ("gripper_states", 2)):
            obs.create_dataset(key, data=rng.normal(size=(t, dim)))
        obs.create_dataset("joint_states", data=rng.normal(size=(t, 7)))
        demo.create_dataset("actions", data=rng.uniform(-1, 1, (t, 7)))
        demo.create_dataset("states", data=rng.normal(size=(t, 10)))
        demo.create_dataset("robot_states", data=rng.normal(size=(t, 9)))
        flags = np.eye(1, t, t - 1, dtype=np.uint8).ravel()
        demo.create_dataset("rewards", data=flags)
        demo.create_dataset("dones", data=flags)
        demo.attrs["num_samples"] = t
        demo.attrs["model_file"] = "<mujoco model='tiny'/>"
        demo.attrs["init_state"] = rng.normal(size=10)
        demo.attrs["embodied_init_state_index"] = 0
    return path


def _train_libero(path: Path) -> None:
    """What `embodied train pdp --data FILE` does with a LIBERO demonstration file."""
    from policies.diffusion.processor_pdp import load_demonstrations
    from sim.libero import demonstration_files
    from sim.libero import load_demonstrations as load_libero

    files = demonstration_files(path)
    dataset: Any = load_libero(path, files=files) if files else path
    load_demonstrations(dataset, cameras=("agentview",))


@pytest.mark.parametrize("kind", ["truncate", "flip", "edit"])
def test_libero_demonstration_file_rejects_corruptions(
    kind: str, libero_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    raw = libero_file.read_bytes()
    path = tmp_path_factory.mktemp("libero_fuzz") / libero_file.name

    @SETTINGS
    @hypothesis.given(_fuzz_file_strategy(kind, raw, libero_file))
    def run(drawn: Any) -> None:
        _write_fuzzed_h5(kind, raw, path, drawn)
        check(lambda: _train_libero(path), path.name)

    run()


# HDF5 regressions: the shrunk cases the fuzzer found, each as the edit it made.
def _damaged_copy(folder: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the shard folder ``folder`` and the path of its shard."""
    out = tmp_path / "demos"
    shutil.copytree(folder, out)
    return out, out / "episode_000000.hdf5"


def _assert_names(load: Callable[[], Any], names: str, *parts: str) -> str:
    """``load()`` raises an EmbodiedError naming ``names`` (and ``parts``); its message."""
    with pytest.raises(EmbodiedError) as info:
        load()
    message = str(info.value)
    for part in (names, *parts):
        assert part in message, f"{part!r} not in {message!r}"
    return message


def test_shard_with_a_shifted_base_address_names_the_file(
    shard_folder: Path, tmp_path: Path
) -> None:
    # flip([192]): the superblock's base address 0 -> 1 moved every object by a byte, and
    # listing the episode's arrays raised h5py's RuntimeError (actual len exceeds EOA)
    folder, shard = _damaged_copy(shard_folder, tmp_path)
    raw = bytearray(shard.read_bytes())
    assert raw[8] == 0 and raw[24:32] == bytes(8)  # superblock version 0, base address 0
    raw[24] = 1
    shard.write_bytes(bytes(raw))
    _assert_names(lambda: _read_dataset(folder), shard.name, "fix:")


# Run in a child process: a regression would crash or hang the test process itself.
_READ_SHARDS = """
import sys
from embodied.datasets import Dataset
from embodied.errors import DatasetError
try:
    list(Dataset(sys.argv[1]))
except DatasetError as exc:
    print(exc)
    sys.exit(3)
"""


def _read_in_child(folder: Path) -> str:
    """Read the dataset in a child process; its DatasetError message (it must raise one)."""
    proc = subprocess.run(
        [sys.executable, "-c", _READ_SHARDS, str(folder)],
        capture_output=True,
        text=True,
        timeout=120,  # the hang regressed: TimeoutExpired
        cwd=ROOT,
    )
    assert proc.returncode == 3, f"rc {proc.returncode} (-11: SIGSEGV): {proc.stderr[-2000:]}"
    return proc.stdout


def test_damaged_global_heap_is_refused_instead_of_hanging(
    shard_folder: Path, tmp_path: Path
) -> None:
    # flip([16459]): the global heap (the JSON attributes' text) grew from 4096 to 6144 bytes;
    # libhdf5 then decodes a zero-length free-space object forever (Dataset() never returned)
    folder, shard = _damaged_copy(shard_folder, tmp_path)
    raw = bytearray(shard.read_bytes())
    at = raw.index(b"GCOL\x01")
    assert raw[at + 8 : at + 16] == (4096).to_bytes(8, "little")  # the collection's size
    raw[at + 9] ^= 0x08
    shard.write_bytes(bytes(raw))
    message = _read_in_child(folder)
    assert shard.name in message and "global heap" in message


def test_damaged_string_type_is_refused_instead_of_crashing(
    shard_folder: Path, tmp_path: Path
) -> None:
    # flip([58059]): the 'instruction' attribute's variable-length string type got kind 9
    # (none); reading the attribute killed the process with SIGSEGV inside libhdf5
    folder, shard = _damaged_copy(shard_folder, tmp_path)
    raw = bytearray(shard.read_bytes())
    name = raw.index(b"instruction\x00")
    datatype = raw.index(b"\x19\x01\x01\x00", name)  # version 1, variable-length; string
    assert datatype - name < 32
    raw[datatype + 1] ^= 0x08
    shard.write_bytes(bytes(raw))
    message = _read_in_child(folder)
    assert shard.name in message and "variable-length sequence" in message


@pytest.mark.parametrize(
    "edit",
    [
        ("group", "data", "dataset"),  # TypeError: a str regex on the rows' bytes
        ("group", "data/demo_0/obs", "dataset"),  # TypeError: Selection can't process
        ("dataset", "data/demo_0/obs/image.agentview", "group"),  # AttributeError: .shape
        ("dataset", "data/demo_0/actions", "group"),  # TypeError: a group indexed by ()
        ("dataset", "data/demo_0/actions", "scalar"),  # IndexError: shape[0] of ()
    ],
)
def test_shard_with_groups_and_arrays_swapped_names_the_file(
    edit: tuple[str, str, str], shard_folder: Path, tmp_path: Path
) -> None:
    folder, shard = _damaged_copy(shard_folder, tmp_path)
    _apply_h5_edit(shard, edit)
    _assert_names(lambda: _read_dataset(folder), shard.name, "fix:")


@pytest.mark.parametrize(
    ("edit", "what"),
    [
        (("dataset", "data/demo_0/actions", "string"), "not numeric"),  # ValueError: float('x')
        (("dataset", "data/demo_0/obs/image.agentview", "string"), "frames"),  # int(b'x')
        (("dataset", "data/demo_0/actions", "nan"), "NaN"),  # trained on: NaN statistics
        (("dataset", "data/demo_0/obs/state", "inf"), "NaN or infinite"),
    ],
)
def test_training_refuses_a_shard_of_bad_values_naming_it(
    edit: tuple[str, str, str], what: str, shard_folder: Path, tmp_path: Path
) -> None:
    folder, shard = _damaged_copy(shard_folder, tmp_path)
    _apply_h5_edit(shard, edit)
    _assert_names(lambda: _train_demonstrations(folder), shard.name, what)


def test_libero_scan_names_a_truncated_demo_file(libero_file: Path, tmp_path: Path) -> None:
    # data[:8]: only the HDF5 signature is left; demonstration_files() raised h5py's OSError
    path = tmp_path / libero_file.name
    path.write_bytes(libero_file.read_bytes()[:8])
    _assert_names(lambda: _train_libero(path), path.name, "fix:")


@pytest.mark.parametrize(
    "edit",
    [
        ("attr", ("data", "problem_info"), 2**40),  # bytes(2**40): a terabyte asked for
        ("attr", ("data", "problem_info"), -1),  # ValueError: negative count
        ("attr", ("data", "problem_info"), "empty"),  # TypeError: bytes(Empty)
        ("attr", ("data", "bddl_file_name"), math.nan),  # UnicodeDecodeError of bytes(nan)
        ("dataset", "data/demo_0/obs/ee_ori", "string"),  # ValueError: a state of text
        ("dataset", "data/demo_0/actions", "string"),  # ValueError: actions of text
        ("dataset", "data/demo_0/actions", "extra_axis"),  # unnamed: actions (5, 7, 1)
    ],
)
def test_libero_demo_file_with_bad_values_names_it(
    edit: tuple[str, Any, Any], libero_file: Path, tmp_path: Path
) -> None:
    path = tmp_path / libero_file.name
    shutil.copy(libero_file, path)
    _apply_h5_edit(path, edit)
    _assert_names(lambda: _train_libero(path), path.name, "fix:")


# ---- LeRobotDataset v3 exports (embodied/datasets/lerobot/) ------------------------------------
# JSON metadata gets tree edits; parquet tables truncation, bit flips and table edits (a column
# dropped, nulled or turned into text, every row dropped); the extras archive and the video
# truncation and bit flips.
LEROBOT_JSON = ["meta/info.json", "meta/stats.json", "meta/embodied.json"]
LEROBOT_PARQUET = [
    "meta/tasks.parquet",
    "meta/episodes/chunk-000/file-000.parquet",
    "data/chunk-000/file-000.parquet",
]
LEROBOT_BINARY = [
    "embodied/extras/episode_000000.npz",
    "videos/observation.images.front/chunk-000/file-000.mp4",
]
TABLE_EDITS = ["drop", "null", "string", "no_rows"]


@pytest.fixture(scope="module")
def lerobot_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tiny episodes (a state, a 16x16 camera, two tasks) exported by ``export_lerobot``."""
    import numpy as np

    from embodied.datasets import EpisodeData, export_lerobot

    episodes = []
    for i, t in enumerate((4, 3)):
        rng = np.random.default_rng(i)
        dones = np.zeros(t, dtype=np.uint8)
        dones[-1] = 1
        episodes.append(
            EpisodeData(
                obs={
                    "state": rng.normal(size=(t, 3)).astype(np.float32),
                    "image.front": rng.integers(0, 255, (t, 16, 16, 3), dtype=np.uint8),
                },
                actions=rng.uniform(-1, 1, size=(t, 2)),
                rewards=np.linspace(0, 1, t),
                dones=dones,
                attrs={"instruction": f"reach target {i}", "success": True, "meta": {"seed": i}},
                extras={"measurements": rng.normal(size=t)},
            )
        )
    out = tmp_path_factory.mktemp("lerobot") / "ds"
    return export_lerobot(episodes, out, fps=10, env_args={"env_id": "test:toy"})


def _read_lerobot(root: Path) -> None:
    """What `embodied datasets describe/export` and `embodied train pdp` read of a folder."""
    from embodied.datasets import LeRobotDataset
    from policies.diffusion.processor_pdp import load_demonstrations

    ds = LeRobotDataset(root)
    list(ds)
    _ = ds.stats, ds.num_frames, ds.video_keys
    load_demonstrations(root, cameras=("front",))


def _edit_table(raw: bytes, column: str, how: str) -> bytes:
    """The parquet table ``raw`` with ``column`` dropped, nulled or made text, or no rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(pa.BufferReader(raw))
    i = table.column_names.index(column)
    if how == "drop":
        table = table.drop_columns([column])
    elif how == "null":
        table = table.set_column(i, column, pa.nulls(len(table), table.schema.field(i).type))
    elif how == "string":
        table = table.set_column(i, column, pa.array(["x"] * len(table)))
    else:
        table = table.slice(0, 0)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def _lerobot_strategy(kind: str, raw: bytes) -> Any:
    if kind == "truncate":
        return truncations(raw)
    if kind == "flip":
        return bit_flips(raw)
    if kind == "table":
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = pq.read_schema(pa.BufferReader(raw)).names
        return st.tuples(st.sampled_from(columns), st.sampled_from(TABLE_EDITS))
    return tree_edits(json.loads(raw)).map(lambda t: json.dumps(t).encode())


@pytest.mark.parametrize(
    ("name", "kind"),
    [(name, "edit") for name in LEROBOT_JSON]
    + [(name, kind) for name in LEROBOT_PARQUET for kind in ("truncate", "flip", "table")]
    + [(name, kind) for name in LEROBOT_BINARY for kind in ("truncate", "flip")],
)
def test_lerobot_export_rejects_corruptions(
    name: str, kind: str, lerobot_export: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    raw = (lerobot_export / name).read_bytes()
    root = tmp_path_factory.mktemp("lerobot_fuzz") / "ds"
    shutil.copytree(lerobot_export, root)

    @SETTINGS
    @hypothesis.given(_lerobot_strategy(kind, raw))
    def run(drawn: Any) -> None:
        data = _edit_table(raw, *drawn) if kind == "table" else drawn
        (root / name).write_bytes(data)
        # the dataset folder at least; a damaged file names itself
        check(lambda: _read_lerobot(root), str(root))

    run()


# LeRobot regressions: the shrunk cases the fuzzer found.
def _lerobot_copy(export: Path, tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(export, root)
    return root


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("features", {"task_index": None}),  # AttributeError: None.get (a feature not an object)
        ("features", {"action": {"dtype": "float64", "shape": "x"}}),  # a shape of text
        ("fps", math.inf),  # OverflowError: int(inf)
    ],
)
def test_lerobot_info_json_with_bad_values_names_it(
    key: str, value: Any, lerobot_export: Path, tmp_path: Path
) -> None:
    root = _lerobot_copy(lerobot_export, tmp_path)
    info = json.loads((root / "meta/info.json").read_text())
    info[key] = {**info[key], **value} if isinstance(value, dict) else value
    (root / "meta/info.json").write_text(json.dumps(info))
    _assert_names(lambda: _read_lerobot(root), "info.json", "fix:")


@pytest.mark.parametrize(
    ("name", "column", "how", "names"),
    [
        ("meta/tasks.parquet", "task_index", "null", "tasks.parquet"),  # TypeError: int(None)
        ("meta/tasks.parquet", "task_index", "string", "tasks.parquet"),  # ValueError: int('x')
        ("meta/episodes/chunk-000/file-000.parquet", "episode_index", "drop", "file-000"),
        ("meta/episodes/chunk-000/file-000.parquet", "length", "string", "file-000"),
        ("data/chunk-000/file-000.parquet", "timestamp", "null", "episode 0"),  # int(NaN)
        ("data/chunk-000/file-000.parquet", "next.done", "string", "episode 0"),
        ("data/chunk-000/file-000.parquet", "observation.state", "null", "episode 0"),
    ],
)
def test_lerobot_table_with_a_bad_column_names_it(
    name: str, column: str, how: str, names: str, lerobot_export: Path, tmp_path: Path
) -> None:
    root = _lerobot_copy(lerobot_export, tmp_path)
    (root / name).write_bytes(_edit_table((root / name).read_bytes(), column, how))
    _assert_names(lambda: _read_lerobot(root), str(root), names, "fix:")


def test_lerobot_column_name_that_is_not_utf8_names_the_table(
    lerobot_export: Path, tmp_path: Path
) -> None:
    # flip([1143]) of the episode table: a byte of a column name in the footer became
    # non-UTF-8 and pyarrow's read_schema raised UnicodeDecodeError
    root = _lerobot_copy(lerobot_export, tmp_path)
    table = root / "meta/episodes/chunk-000/file-000.parquet"
    raw = table.read_bytes()
    assert b"length" in raw
    table.write_bytes(raw.replace(b"length", b"l\xe9ngth"))
    _assert_names(lambda: _read_lerobot(root), str(table), "fix:")


def test_lerobot_task_string_that_is_not_utf8_names_the_table(
    lerobot_export: Path, tmp_path: Path
) -> None:
    # flip([1095]) of the task table: a byte of a task string became non-UTF-8; parquet does
    # not check string values, and to_pylist() raised UnicodeDecodeError
    root = _lerobot_copy(lerobot_export, tmp_path)
    table = root / "meta/tasks.parquet"
    raw = table.read_bytes()
    assert b"reach target 0" in raw  # the dictionary page and the statistics
    table.write_bytes(raw.replace(b"reach target 0", b"r\xe9ach target 0"))
    _assert_names(lambda: _read_lerobot(root), str(table), "fix:")


def _npz_with_header_shape(shape: tuple[int, ...]) -> bytes:
    """An ``np.savez`` archive of 4 float64 values whose header declares ``shape``."""
    import io
    import zipfile

    import numpy as np

    member = io.BytesIO()
    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(member, header)
    member.write(np.zeros(4).tobytes())
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("measurements.npy", member.getvalue())
    return archive.getvalue()


@pytest.mark.parametrize("damage", ["empty", "first_byte", "absurd_shape"])
def test_lerobot_damaged_extras_archive_names_it(
    damage: str, lerobot_export: Path, tmp_path: Path
) -> None:
    root = _lerobot_copy(lerobot_export, tmp_path)
    path = root / "embodied/extras/episode_000000.npz"
    raw = path.read_bytes()
    data = {
        "empty": b"",  # EOFError: No data left in file
        "first_byte": bytes([raw[0] ^ 1]) + raw[1:],  # flip([0]): ValueError, "pickled data"
        "absurd_shape": _npz_with_header_shape((10**13,)),  # MemoryError: 72.8 TiB asked for
    }[damage]
    path.write_bytes(data)
    _assert_names(lambda: _read_lerobot(root), path.name, "fix:")


def test_lerobot_video_with_a_damaged_brand_names_it(lerobot_export: Path, tmp_path: Path) -> None:
    # flip([79]): the MP4's major brand 'isom' became non-UTF-8; PyAV raised UnicodeDecodeError
    root = _lerobot_copy(lerobot_export, tmp_path)
    path = root / LEROBOT_BINARY[1]
    raw = bytearray(path.read_bytes())
    assert raw[4:12] == b"ftypisom"
    raw[9] ^= 0x80
    path.write_bytes(bytes(raw))
    _assert_names(lambda: _read_lerobot(root), path.name, "fix:")


# ---- small JSON and safetensors artefacts: judge calibration, shields, steering, Demo2Reward -----
def _json_strategy(kind: str, raw: bytes) -> Any:
    """Truncations, bit flips or tree edits of the JSON file ``raw``."""
    if kind == "truncate":
        return truncations(raw)
    if kind == "flip":
        return bit_flips(raw)
    return tree_edits(json.loads(raw)).map(lambda t: json.dumps(t).encode())


@pytest.fixture(scope="module")
def minijudge_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A copy of the shipped minijudge checkpoint and its loaded text encoder (to share)."""
    from embodied.rewards.minijudge.modeling_minijudge import SHIPPED, MiniJudge

    folder = tmp_path_factory.mktemp("judge") / "minijudge"
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return folder, MiniJudge.from_pretrained(folder, device="cpu").text


@pytest.mark.parametrize("kind", ["truncate", "flip", "edit"])
def test_judge_calibration_json_rejects_corruptions(
    kind: str, minijudge_folder: tuple[Path, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    from embodied.apps.training.training_minijudge import checkpoint_seeds
    from embodied.rewards.minijudge.modeling_minijudge import MiniJudge

    shipped, text = minijudge_folder
    raw = (shipped / "calibration.json").read_bytes()
    folder = tmp_path_factory.mktemp("calib") / "minijudge"
    shutil.copytree(shipped, folder)

    @SETTINGS
    @hypothesis.given(_json_strategy(kind, raw))
    def run(data: bytes) -> None:
        (folder / "calibration.json").write_bytes(data)
        check(
            lambda: MiniJudge.from_pretrained(folder, device="cpu", text_encoder=text),
            "calibration.json",
        )
        # `embodied train minijudge` reads the seeds a checkpoint records (select, --init)
        check(lambda: checkpoint_seeds(folder), "calibration.json")

    run()


@pytest.fixture(scope="module")
def shield_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny robust shield (one measured joint, two 4-dim actions) saved by RobustShield.save."""
    import numpy as np

    from controllers.shield import RobustShield
    from controllers.shield.abstraction import ActionSet, BinSpec
    from controllers.shield.configuration_shield import ShieldConfig
    from controllers.shield.pac import TransitionCounts

    config = ShieldConfig(bins=(BinSpec("q0", (0.0, 0.5), "rad"),), horizon=3, automaton="builtin")
    counts = TransitionCounts(3, 2)
    for s, a, s2 in [(0, 0, 1), (1, 1, 2), (1, 0, 0), (2, 1, 2)]:
        counts.add(s, a, s2)
    actions = ActionSet(np.array([[0.0] * 4, [0.1] * 4]))
    shield = RobustShield.create(config, {"bad": [False, False, True]}, actions, counts=counts)
    return shield.save(tmp_path_factory.mktemp("shield") / "shield")


def _load_deploy_shield(folder: Path) -> None:
    """What `embodied deploy --shield FOLDER` does with the folder (4-joint robot)."""
    from embodied.apps.deploy import DeployConfig, load_shield

    load_shield(DeployConfig("hold", shield=str(folder)), action_dim=4)


@pytest.mark.parametrize(
    ("name", "kind"),
    [("config.json", k) for k in ("truncate", "flip", "edit")]
    + [("shield.safetensors", k) for k in ("truncate", "flip", "header")],
)
def test_shield_files_reject_corruptions(
    name: str, kind: str, shield_folder: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    raw = (shield_folder / name).read_bytes()
    strategy = (
        _json_strategy(kind, raw) if name.endswith(".json") else safetensors_corruptions(kind, raw)
    )
    folder = tmp_path_factory.mktemp("shield_fuzz") / "shield"
    shutil.copytree(shield_folder, folder)

    @SETTINGS
    @hypothesis.given(strategy)
    def run(data: bytes) -> None:
        (folder / name).write_bytes(data)
        check(lambda: _load_deploy_shield(folder), str(folder))

    run()


@pytest.fixture(scope="module")
def steering_setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any]:
    """A steering direction saved for a tiny OpenVLA model, and that model and processor."""
    import torch

    from policies.openvla.configuration_openvla import OpenVLAConfig
    from policies.openvla.modeling_openvla import OpenVLAModel
    from policies.openvla.processor_openvla import OpenVLAProcessor, build_tiny_tokenizer
    from policies.openvla.steering import SteeringDirection

    stats = {"toy": {"action": {"q01": [-1.0] * 7, "q99": [1.0] * 7, "mask": [True] * 7}}}
    config = OpenVLAConfig.tiny(norm_stats=stats)
    torch.manual_seed(0)
    model = OpenVLAModel(config).eval()
    direction = SteeringDirection(torch.randn(config.llm_dim), layer=1, concept="ee_speed")
    path = direction.save(tmp_path_factory.mktemp("steer") / "speed")
    return path, model, OpenVLAProcessor(config, build_tiny_tokenizer())


def _steered_policy(path: Path, model: Any, processor: Any) -> None:
    """The OpenVLA policy `embodied lab steer`/`eval` builds with ``--direction PATH``."""
    from policies.openvla.policy_openvla import OpenVLAPolicy

    policy = OpenVLAPolicy(model, processor, intervention=path)
    if policy.hook is not None:
        policy.hook.remove()  # the model is shared by every case


@pytest.mark.parametrize(
    ("suffix", "kind"),
    [(".json", k) for k in ("truncate", "flip", "edit")]
    + [(".safetensors", k) for k in ("truncate", "flip", "header")],
)
def test_steering_direction_rejects_corruptions(
    suffix: str,
    kind: str,
    steering_setup: tuple[Path, Any, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    saved, model, processor = steering_setup
    raw = saved.with_suffix(suffix).read_bytes()
    strategy = (
        _json_strategy(kind, raw) if suffix == ".json" else safetensors_corruptions(kind, raw)
    )
    folder = tmp_path_factory.mktemp("steer_fuzz")
    for other in (".json", ".safetensors"):
        shutil.copy(saved.with_suffix(other), folder / f"speed{other}")
    path = folder / "speed.safetensors"

    @SETTINGS
    @hypothesis.given(strategy)
    def run(data: bytes) -> None:
        path.with_suffix(suffix).write_bytes(data)
        check(lambda: _steered_policy(path, model, processor), "speed.")

    run()


@pytest.fixture(scope="module")
def instruction_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ``instruction.json`` written by Demo2Reward's ``save_result``."""
    import numpy as np

    from embodied.rewards.calibration import Rates
    from embodied.rewards.demo2reward.objective import Evaluation
    from embodied.rewards.demo2reward.optimization import OptimizationResult, save_result

    def evaluation(template: str, j: float) -> Evaluation:
        rates = Rates(tpr=90.0, tnr=95.0, fpr=5.0, fnr=10.0, n_pos=10, n_neg=20)
        return Evaluation(template, rates, j, np.full(30, 0.5), np.zeros(30))

    best = evaluation("Did the robot {task}? Answer yes or no.", 95.9)
    initial = evaluation("The robot was instructed with the task: {task}.", 90.5)
    result = OptimizationResult(best.template, best, initial, [{"step": 0, "J": 90.5}], 1.0)
    table = [{"threshold": 0.5, "tpr": 90.0, "tnr": 95.0}]
    folder = tmp_path_factory.mktemp("d2r")
    return save_result(result, folder, {"backend": "minijudge", "threshold": 0.15}, table)


@pytest.mark.parametrize("kind", ["truncate", "flip", "edit"])
def test_demo2reward_instruction_rejects_corruptions(
    kind: str, instruction_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from embodied.rewards.demo2reward import load_instruction

    raw = instruction_file.read_bytes()
    path = tmp_path_factory.mktemp("d2r_fuzz") / "instruction.json"

    @SETTINGS
    @hypothesis.given(_json_strategy(kind, raw))
    def run(data: bytes) -> None:
        path.write_bytes(data)
        check(lambda: load_instruction(path), "instruction.json")

    run()


# ---- tune presets: gains files as the tune page loads them and `embodied deploy` steers with ----
@pytest.fixture(scope="module")
def tune_session(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A tune session on the built-in arm task (no camera), not started."""
    from embodied.apps.tune import TuneConfig, TuneSession
    from embodied.apps.tune.task import build_task

    config = TuneConfig(out_dir=tmp_path_factory.mktemp("tune"))
    return TuneSession(build_task(config, camera=False), config)


@pytest.mark.parametrize("kind", ["truncate", "flip", "edit"])
def test_tune_preset_rejects_corruptions(
    kind: str, tune_session: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import yaml

    import controllers
    from controllers.pid import PIDConfig, PIDController
    from embodied.apps.deploy import steering_from_file
    from embodied.apps.tune import gains_io

    folder = tmp_path_factory.mktemp("preset")
    controllers.save(
        PIDController(PIDConfig(kp=0.7, ki=55.0, output_min=-1.0, output_max=1.0)),
        folder / "good.yaml",
        meta={"env_id": "mujoco:arm_reach", "concept": "ee_speed", "knob": "alpha",
              "setpoint": 0.2},
    )  # fmt: skip
    raw = (folder / "good.yaml").read_bytes()
    strategy = {
        "truncate": truncations(raw),
        "flip": bit_flips(raw),
        "edit": tree_edits(yaml.safe_load(raw)).map(lambda t: yaml.safe_dump(t).encode()),
    }[kind]
    path = folder / "tuned.yaml"

    @SETTINGS
    @hypothesis.given(strategy)
    def run(data: bytes) -> None:
        path.write_bytes(data)
        check(lambda: gains_io.load_path(tune_session, path), "tuned.yaml")
        check(lambda: steering_from_file(path), "tuned.yaml")

    run()


# Regressions of the small artefacts: the shrunk cases the fuzzer found.
@pytest.mark.timeout(60)  # the regression is a hang
@pytest.mark.parametrize("horizon", [2**40, 1e308])
def test_shield_with_an_absurd_horizon_is_refused(
    horizon: float, shield_folder: Path, tmp_path: Path
) -> None:
    # tree edit config.horizon = 2**40: computing the shield ran 2**40 backups (hours)
    folder = tmp_path / "shield"
    shutil.copytree(shield_folder, folder)
    meta = json.loads((folder / "config.json").read_text())
    meta["config"]["horizon"] = horizon
    (folder / "config.json").write_text(json.dumps(meta))
    _assert_names(lambda: _load_deploy_shield(folder), str(folder), "horizon", "fix:")


def test_shield_with_more_propositions_than_labels_names_it(
    shield_folder: Path, tmp_path: Path
) -> None:
    # tree edit propositions = [1, "a"]: IndexError picking a label column that is not there
    folder = tmp_path / "shield"
    shutil.copytree(shield_folder, folder)
    meta = json.loads((folder / "config.json").read_text())
    meta["propositions"] = [1, "a"]
    (folder / "config.json").write_text(json.dumps(meta))
    _assert_names(lambda: _load_deploy_shield(folder), str(folder), "fix:")


@pytest.mark.parametrize(
    "layer",
    [-1, math.inf],  # the hook's ConfigError named no file; OverflowError: int(inf)
)
def test_steering_direction_with_a_bad_layer_names_the_file(
    layer: float, steering_setup: tuple[Path, Any, Any], tmp_path: Path
) -> None:
    saved, model, processor = steering_setup
    for suffix in (".json", ".safetensors"):
        shutil.copy(saved.with_suffix(suffix), tmp_path / f"speed{suffix}")
    meta = json.loads((tmp_path / "speed.json").read_text())
    meta["layer"] = layer
    (tmp_path / "speed.json").write_text(json.dumps(meta))
    path = tmp_path / "speed.safetensors"
    _assert_names(lambda: _steered_policy(path, model, processor), "speed.", "fix:")


def test_demo2reward_instruction_without_a_template_names_the_file(
    instruction_file: Path, tmp_path: Path
) -> None:
    # flip([40]) renamed the "instruction" key: the template read as "" and format_instruction's
    # ConfigError named no file
    from embodied.rewards.demo2reward import load_instruction

    data = json.loads(instruction_file.read_text())
    del data["instruction"]
    path = tmp_path / "instruction.json"
    path.write_text(json.dumps(data))
    _assert_names(lambda: load_instruction(path), str(path), "{task}", "fix:")


def test_tune_loads_a_gains_file_with_unlimited_output(tune_session: Any, tmp_path: Path) -> None:
    # data[:15] of a saved file: a valid PID file without output limits (infinite); the tune
    # session handed to_dict's None for them to set_gains, which refused it (naming no file)
    from embodied.apps.tune import gains_io

    path = tmp_path / "tuned.yaml"
    path.write_bytes(b"type: pid\nkp: 0.7\n")
    gains_io.load_path(tune_session, path)
    pid = tune_session.live.controller("pid")
    assert tune_session.live.mode == "pid" and pid.config.kp == 0.7
    assert pid.config.output_min == -math.inf and pid.config.output_max == math.inf


@pytest.mark.parametrize(
    "meta",
    [
        {"concept": "ee_speed", "setpoint": "x"},  # ValueError: float('x')
        {"concept": "ee_speed", "setpoint": None},  # TypeError: float(None)
        {"concept": "ee_speed", "setpoint": math.nan},  # a setpoint the loop chases forever
        {"concept": None, "setpoint": 0.2},  # UnknownNameError naming no file
    ],
)
def test_deploy_controller_file_with_bad_meta_names_it(
    meta: dict[str, Any], tmp_path: Path
) -> None:
    import yaml

    from embodied.apps.deploy import steering_from_file

    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump({"type": "pid", "kp": 0.7, "meta": meta}))
    _assert_names(lambda: steering_from_file(path), str(path), "fix:")


def test_collect_counts_no_episode_of_a_shard_with_a_dangling_link(
    shard_folder: Path, tmp_path: Path
) -> None:
    """Shrunk from the slow profile: a bit flip left a dangling link in ``data``, and h5py's
    ``values()`` yields None for it; the rerun's count of existing episodes raised."""
    import h5py

    from embodied.apps.collect import _shard_metas

    folder = tmp_path / "demos"
    shutil.copytree(shard_folder, folder)
    with h5py.File(folder / "episode_000000.hdf5", "a") as f:
        f["data"]["demo_9"] = h5py.SoftLink("/nowhere")
    assert list(_shard_metas(folder)) == []  # a damaged shard counts none (Dataset reports it)
    check(lambda: _read_dataset(folder), "episode_000000.hdf5")
