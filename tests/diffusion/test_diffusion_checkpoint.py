"""save_pretrained / from_pretrained: safetensors + JSON, stats inside, strict key checks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import policies
from embodied.errors import CheckpointError
from policies.diffusion.modeling_pdp import PDPModel
from policies.diffusion.policy_pdp import PDPPolicy
from tests.diffusion.conftest import tiny_config


def _policy() -> PDPPolicy:
    torch.manual_seed(0)
    model = PDPModel(tiny_config())
    model.normalizer.set_stats(
        state_min=-np.ones(4),
        state_max=np.ones(4),
        action_min=-np.ones(2) * 0.5,
        action_max=np.ones(2) * 0.5,
        z_mean=np.array([0.1, -0.2]),
        z_whiten=np.array([[2.0, 0.0], [0.5, 1.0]]),
    )
    return PDPPolicy(model)


def test_roundtrip_same_actions_no_pickle(tmp_path: Path) -> None:
    policy = _policy()
    policy.set_knob("z", [1.0, -1.0])
    policy.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["policy_type"] == "pdp" and cfg["horizon"] == 8
    weights = load_file(str(tmp_path / "model.safetensors"))
    assert torch.equal(weights["normalizer.z_whiten"], torch.tensor([[2.0, 0.0], [0.5, 1.0]]))
    loaded = policies.load(tmp_path)  # through CHECKPOINT_LOADERS["pdp"]
    assert isinstance(loaded, PDPPolicy)
    loaded.set_knob("z", [1.0, -1.0])
    obs = {"state": np.array([0.1, 0.2, 0.0, 0.0], np.float32)}
    policy.reset()
    loaded.reset()
    np.testing.assert_array_equal(
        policy.predict_action_chunk(obs), loaded.predict_action_chunk(obs)
    )


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("normalizer.action_max", None, "normalizer.action_max"),  # missing key
        ("normalizer.state_min", torch.zeros(7), "state_min"),  # mismatched shape
        ("normalizer.state_max", torch.full((4,), float("nan")), "state_max"),  # NaN stats
    ],
    ids=["missing_key", "mismatched_shape", "nan"],
)
def test_bad_stats_are_an_error(
    tmp_path: Path, key: str, value: torch.Tensor | None, match: str
) -> None:
    _policy().save_pretrained(tmp_path)
    w = load_file(str(tmp_path / "model.safetensors"))
    if value is None:
        del w[key]
    else:
        w[key] = value
    save_file(w, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=match):
        PDPPolicy.from_pretrained(tmp_path)


def test_config_weights_mismatch_and_missing_files(tmp_path: Path) -> None:
    _policy().save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["hidden_dim"] = 48
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="different models"):
        PDPPolicy.from_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model.safetensors"):
        PDPPolicy.from_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="does not exist"):
        PDPPolicy.from_pretrained(tmp_path / "nope")


def test_unsaved_stats_refused_at_construction() -> None:
    with pytest.raises(CheckpointError, match="not set"):
        PDPPolicy(PDPModel(tiny_config()))


class _Killed(BaseException):
    """Stands for SIGKILL landing inside a save (nothing after it runs)."""


@pytest.mark.parametrize("killed_in", ["write_json", "save_file"])
def test_weights_never_stand_without_their_config(
    killed_in: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the kill-anywhere test: a kill between the two writes of a training run's
    first save left model.safetensors without config.json, a folder nothing could load."""
    import policies.diffusion.policy_pdp as policy_pdp

    def killed(*args: object, **kwargs: object) -> None:
        raise _Killed

    monkeypatch.setattr(policy_pdp, killed_in, killed)
    with pytest.raises(_Killed):
        policy_pdp.save_model(_policy().model, tmp_path / "run")
    names = {p.name for p in (tmp_path / "run").iterdir()}
    assert "model.safetensors" not in names or "config.json" in names, names
