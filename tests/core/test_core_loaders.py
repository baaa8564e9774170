"""Every loader refuses a truncated or malformed file with the project's error.

Each pristine checkpoint (PDP run, RL controller, minijudge, CLIP/LLaVA judges, OpenVLA) and
dataset is built for real with tiny configs, then one file of a copy is damaged. The loader
must raise :class:`CheckpointError` / :class:`DatasetError` whose message names the damaged
file and says how to fix it, and the CLI must exit 2 without a traceback.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from core_plant import FirstOrderEnv, GainPolicy

from embodied.errors import CheckpointError, DatasetError, EmbodiedError

# ---- pristine folders, built once per session ------------------------------------------


def _build_pdp(root: Path) -> Path:
    from policies.diffusion.training_pdp import train_pdp
    from tests.diffusion.conftest import synthetic_demonstrations, tiny_config

    cfg = tiny_config(steps=2)
    cfg.manifold.steps = 2
    train_pdp(
        synthetic_demonstrations(), root, cfg, checkpoint_every=1, progress=False, tensorboard=False
    )
    return root


def _build_rl(root: Path) -> Path:
    from controllers.rl.configuration_rl import RLControllerConfig
    from controllers.rl.modeling_rl import MLPActor, RLController

    rng = np.random.default_rng(0)
    state = {
        "hidden.0.weight": rng.normal(size=(8, 5)).astype(np.float32),
        "hidden.0.bias": np.zeros(8, np.float32),
        "out.weight": rng.normal(size=(1, 8)).astype(np.float32),
        "out.bias": np.zeros(1, np.float32),
    }
    return RLController(RLControllerConfig(hidden_sizes=(8,)), MLPActor(state)).save_pretrained(
        root
    )


def _build_minijudge(root: Path) -> Path:
    from embodied.rewards.minijudge.modeling_minijudge import SHIPPED

    shutil.copytree(SHIPPED, root, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return root


def _build_clip(root: Path) -> Path:
    from embodied.rewards.tiny import build_tiny_clip

    return build_tiny_clip(root, "clip")


def _build_llava(root: Path) -> Path:
    from embodied.rewards.tiny import build_tiny_llava

    return build_tiny_llava(root)


def _build_openvla(root: Path) -> Path:
    import torch

    from policies.openvla.loading_openvla import save_pretrained
    from policies.openvla.modeling_openvla import OpenVLAModel
    from policies.openvla.processor_openvla import build_tiny_tokenizer
    from tests.openvla.conftest import tiny_config

    torch.manual_seed(0)
    return save_pretrained(OpenVLAModel(tiny_config()).eval(), build_tiny_tokenizer(), root)


def _build_dataset(root: Path) -> Path:
    from embodied.datasets import DatasetWriter
    from embodied.loop import rollout

    writer = DatasetWriter(root, env_args={"env_id": "test:first_order"})
    writer.add(rollout(FirstOrderEnv(goal=1e9), GainPolicy(), max_steps=5))
    return root


def _build_steering(root: Path) -> Path:
    import torch

    from policies.openvla.steering import NeuronCluster, SteeringDirection

    root.mkdir(parents=True)
    SteeringDirection(torch.ones(4), layer=1, concept="speed").save(root / "direction")
    NeuronCluster(1, torch.tensor([0, 2]), torch.ones(2), concept="speed").save(root / "neurons")
    return root


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "pdp": _build_pdp,
    "rl": _build_rl,
    "minijudge": _build_minijudge,
    "clip": _build_clip,
    "llava": _build_llava,
    "openvla": _build_openvla,
    "dataset": _build_dataset,
    "steering": _build_steering,
}


# ---- the loaders under test --------------------------------------------------------------


def _load_policy(folder: Path) -> Any:
    import policies

    return policies.load(folder, device="cpu")


def _load_train_latents(folder: Path) -> Any:
    from policies.diffusion.training_pdp import load_train_latents

    return load_train_latents(folder)


def _resume_pdp(folder: Path) -> Any:
    from policies.diffusion.training_pdp import train_pdp
    from tests.diffusion.conftest import synthetic_demonstrations

    return train_pdp(
        synthetic_demonstrations(), folder, None, resume=True, progress=False, tensorboard=False
    )


def _load_rl(folder: Path) -> Any:
    import controllers

    return controllers.make("rl", path=str(folder))


def _load_judge(folder: Path) -> Any:
    from embodied.rewards import load_judge

    return load_judge(str(folder), device="cpu")


def _read_dataset(folder: Path) -> Any:
    from embodied.datasets import Dataset

    return list(Dataset(folder))


def _open_writer(folder: Path) -> Any:
    from embodied.datasets import DatasetWriter

    return DatasetWriter(folder)


def _load_direction(folder: Path) -> Any:
    from policies.openvla.steering import load_intervention

    return load_intervention(folder / "direction")


def _load_neurons(folder: Path) -> Any:
    from policies.openvla.steering import load_intervention

    return load_intervention(folder / "neurons")


LOADERS: dict[str, tuple[str, Callable[[Path], Any], type[EmbodiedError]]] = {
    "pdp": ("pdp", _load_policy, CheckpointError),
    "pdp_latents": ("pdp", _load_train_latents, CheckpointError),
    "pdp_resume": ("pdp", _resume_pdp, CheckpointError),
    "rl": ("rl", _load_rl, CheckpointError),
    "minijudge": ("minijudge", _load_judge, CheckpointError),
    "contrastive": ("clip", _load_judge, CheckpointError),
    "generative": ("llava", _load_judge, CheckpointError),
    "openvla": ("openvla", _load_policy, CheckpointError),
    "dataset": ("dataset", _read_dataset, DatasetError),
    "dataset_writer": ("dataset", _open_writer, DatasetError),
    "steering_direction": ("steering", _load_direction, CheckpointError),
    "steering_neurons": ("steering", _load_neurons, CheckpointError),
}
"""Loader name -> (pristine folder kind, load(folder), error it must raise)."""

FILES: dict[str, tuple[str, ...]] = {
    "pdp": ("config.json", "model.safetensors"),
    "pdp_latents": ("train_state.json", "train_state_*.safetensors"),
    "pdp_resume": ("train_state.json", "train_state_*.safetensors"),
    "rl": ("config.json", "model.safetensors"),
    "minijudge": ("config.json", "model.safetensors", "calibration.json"),
    "contrastive": ("config.json", "model.safetensors"),
    "generative": ("config.json", "model.safetensors"),
    "openvla": ("config.json", "model.safetensors"),
    "dataset": ("episode_000000.hdf5",),
    "dataset_writer": ("meta.json",),
    "steering_direction": ("direction.json", "direction.safetensors"),
    "steering_neurons": ("neurons.json", "neurons.safetensors"),
}
"""Loader name -> the files (glob patterns) it reads that get damaged."""


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _malform(path: Path) -> None:
    """A file whose bytes are complete but whose content is not what the loader expects."""
    if path.suffix == ".json":
        path.write_text("[1, 2, 3]\n")  # valid JSON, but not the object every loader needs
    elif path.suffix == ".safetensors":
        header = b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": '  # cut mid-header
        path.write_bytes(struct.pack("<Q", len(header)) + header)
    elif path.suffix == ".hdf5":
        with h5py.File(path, "a") as f:
            f["data"].attrs["env_args"] = '{"env_id": "test", '
    else:
        raise AssertionError(f"no malformation for {path}")


CASES = [
    pytest.param(loader, pattern, damage, id=f"{loader}-{pattern}-{damage}")
    for loader, patterns in FILES.items()
    for pattern in patterns
    for damage in ("truncated", "malformed")
]


@pytest.mark.parametrize(("loader", "pattern", "damage"), CASES)
def test_damaged_file_gives_the_projects_error_naming_file_and_fix(
    pristine: Callable[[str], Path], tmp_path: Path, loader: str, pattern: str, damage: str
) -> None:
    kind, load, error = LOADERS[loader]
    folder = tmp_path / kind
    shutil.copytree(pristine(kind), folder)
    (target,) = sorted(folder.glob(pattern))
    (_truncate if damage == "truncated" else _malform)(target)
    with pytest.raises(error) as info:
        load(folder)
    msg = str(info.value)
    assert str(target) in msg, msg
    assert "fix:" in msg, msg


def test_pristine_folders_load(pristine: Callable[[str], Path]) -> None:
    """The damage, not the builders, is what the test above detects."""
    for name, (kind, load, _) in LOADERS.items():
        if name != "pdp_resume":  # resuming a finished run is covered by the diffusion tests
            assert load(pristine(kind)) is not None, name


_RELEASED_7B_CONFIG = {
    "arch_specifier": "no-align+fused-gelu-mlp",
    "architectures": ["OpenVLAForActionPrediction"],
    "auto_map": {"AutoConfig": "configuration_prismatic.OpenVLAConfig"},
    "hf_llm_id": "meta-llama/Llama-2-7b-hf",
    "image_resize_strategy": "resize-naive",
    "image_sizes": [224, 224],
    "llm_backbone_id": "llama2-7b-pure",
    "llm_max_length": 2048,
    "model_type": "openvla",
    "n_action_bins": 256,
    "norm_stats": {
        "bridge_orig": {
            "action": {
                "q01": [-0.03, -0.04, -0.03, -0.1, -0.1, -0.2, 0.0],
                "q99": [0.03, 0.04, 0.04, 0.1, 0.1, 0.2, 1.0],
                "mask": [True, True, True, True, True, True, False],
            },
            "num_transitions": 2135463,
        }
    },
    "output_projector_states": False,
    "pad_to_multiple_of": 64,
    "pad_token_id": 32000,
    "text_config": {"model_type": "llama", "pad_token_id": 32000, "vocab_size": 32064},
    "timm_model_ids": ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"],
    "timm_override_act_layers": [None, None],
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1",
    "use_fused_vision_backbone": True,
    "vision_backbone_id": "dinosiglip-vit-so-224px",
}
"""The keys of ``openvla/openvla-7b``'s config.json: no ``policy_type``, no ``openvla``."""


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(_RELEASED_7B_CONFIG, id="released-openvla-7b"),
        pytest.param({**_RELEASED_7B_CONFIG, "n_action_bins": "many"}, id="released-bad-value"),
        pytest.param({"policy_type": "openvla"}, id="ours-without-openvla-key"),
        pytest.param({"architectures": ["Nothing"]}, id="no-policy-type"),
    ],
)
def test_checkpoint_configs_without_our_keys_give_a_clear_error(
    tmp_path: Path, config: dict[str, Any]
) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as info:
        _load_policy(tmp_path)
    msg = str(info.value)
    assert str(tmp_path) in msg and "fix:" in msg, msg


def _embodied(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "embodied", *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize("damage", ["truncated", "malformed"])
def test_cli_eval_of_a_damaged_checkpoint_exits_2_without_traceback(
    pristine: Callable[[str], Path], tmp_path: Path, damage: str
) -> None:
    folder = tmp_path / "pdp"
    shutil.copytree(pristine("pdp"), folder)
    target = folder / ("model.safetensors" if damage == "truncated" else "config.json")
    (_truncate if damage == "truncated" else _malform)(target)
    proc = _embodied(
        "eval", "--env", "mujoco:reach_around", "--policy", str(folder), "--episodes", "1"
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    assert "Traceback" not in output and str(target) in proc.stderr and "fix:" in proc.stderr


def test_cli_train_on_a_damaged_dataset_exits_2_without_traceback(
    pristine: Callable[[str], Path], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(pristine("dataset"), data)
    shard = data / "episode_000000.hdf5"
    _malform(shard)
    proc = _embodied("train", "pdp", "--data", str(data), "--out", str(tmp_path / "run"))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    assert "Traceback" not in output and str(shard) in proc.stderr and "fix:" in proc.stderr
