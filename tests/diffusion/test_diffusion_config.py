"""PDPConfig validation, derived fields and JSON round trip."""

from __future__ import annotations

import json

import pytest

from embodied.errors import ConfigError
from policies.diffusion.configuration_pdp import ManifoldConfig, PDPConfig


def test_derived_fields_and_roundtrip() -> None:
    cfg = PDPConfig(state_dim=8, action_dim=2, n_obs_steps=3, horizon=12, n_action_steps=6)
    assert cfg.obs_cond_dim == 24
    assert cfg.chunk_dim == 24
    assert cfg.path_dims == (0, 1)
    assert cfg.manifold.z_dim == cfg.z_dim == 2
    again = PDPConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg


def test_manifold_z_dim_follows_policy() -> None:
    assert PDPConfig(z_dim=3).manifold.z_dim == 3


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"n_action_steps": 20, "horizon": 16}, "n_action_steps=20"),
        ({"n_obs_steps": 0}, "n_obs_steps=0"),
        ({"denoiser": "unet", "horizon": 10, "unet_channels": (8, 16, 32)}, "horizon=10"),
        ({"denoiser": "transformer"}, "'transformer'"),
        ({"num_inference_steps": 200}, "num_inference_steps=200"),
        ({"path_dims": (0, 9)}, "path_dims"),
        ({"state_names": ("a",)}, "state_names=('a',) has 1"),
        ({"z_dim": -1}, "z_dim=-1"),
    ],
)
def test_invalid_configs_name_the_value(kw: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match="fix:") as err:
        PDPConfig(**kw)
    assert needle in str(err.value)


def test_manifold_validation() -> None:
    with pytest.raises(ConfigError, match="n_heads"):
        ManifoldConfig(d_model=30, n_heads=4)
    with pytest.raises(ConfigError, match="batch_size"):
        ManifoldConfig(batch_size=1)


def test_unknown_keys_rejected() -> None:
    data = PDPConfig().to_dict()
    data["future_field"] = 1
    with pytest.raises(ConfigError, match="future_field"):
        PDPConfig.from_dict(data)
