"""Checkpoint selection on development scenes never touches LIBERO's fixed init states."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from embodied.errors import ConfigError

pytestmark = [pytest.mark.libero, pytest.mark.usefixtures("libero_assets")]

from embodied.apps.evaluation import EvalConfig, build_grid  # noqa: E402
from embodied.apps.training.selection_pdp import (  # noqa: E402
    SelectConfig,
    select_snapshot,
    trained_env_kwargs,
)
from policies.diffusion.training_pdp import train_pdp  # noqa: E402
from sim.libero import load_demonstrations as load_libero  # noqa: E402
from sim.libero.env import LiberoEnv  # noqa: E402
from tests.libero.test_libero_demonstrations import (  # noqa: E402
    TINY_VISUOMOTOR_PDP,
    write_libero_demonstration_file,
)

SIZE = 32


def test_sampled_scenes_use_placement_seeds_not_init_states() -> None:
    fixed = build_grid(EvalConfig(envs="libero:libero_object:0", episodes=3, seed=7))
    assert [s.reset_options for s in fixed] == [{"init_state": k} for k in range(3)]
    dev = build_grid(
        EvalConfig(envs="libero:libero_object:0", episodes=3, seed=900, scenes="sampled")
    )
    assert [s.reset_options for s in dev] == [{"placement_seed": 900 + k} for k in range(3)]
    assert all(s.init_state is None for s in dev)


def test_selection_never_reads_the_official_init_states(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "pick_up_the_alphabet_soup_and_place_it_in_the_basket_demo.hdf5"
    write_libero_demonstration_file(data, lengths=(6, 9))
    run = tmp_path / "run"
    overrides = {**TINY_VISUOMOTOR_PDP, "steps": 3}
    demos = load_libero(data)
    train_pdp(demos, run, overrides=overrides, progress=False, tensorboard=False,
              snapshot_every_s=1e-9)  # fmt: skip
    assert len(list((run / "snapshots").glob("step_*"))) == 3  # one per step at this period

    def forbidden(self: LiberoEnv) -> None:
        raise AssertionError("checkpoint selection read LIBERO's fixed init states")

    monkeypatch.setattr(LiberoEnv, "init_states", property(forbidden))
    config = SelectConfig(
        str(run),
        env="libero:libero_object:0",
        episodes=2,
        seed=900_000,
        workers=0,
        # the run's own cameras and image size (`pdp-select`'s default): any other size is
        # refused by the policy's processor before an episode runs
        env_kwargs={"libero": trained_env_kwargs(run)},
        max_steps=3,
    )
    assert config.env_kwargs["libero"] == {
        "cameras": ("agentview", "eye_in_hand"),
        "render_size": SIZE,
    }
    summary = select_snapshot(config)
    assert [r["step"] for r in summary["curve"]] == [1, 2, 3]
    assert all(r["n"] == 2 for r in summary["curve"])
    assert (run / "best" / "model.safetensors").exists()
    assert (run / "selection" / "curve.png").stat().st_size > 0
    episodes = json.loads((run / "selection" / "step_0000001" / "results.json").read_text())
    options = [e["spec"]["reset_options"] for e in episodes["episodes"]]
    assert options == [{"placement_seed": 900_000}, {"placement_seed": 900_001}]
    # an episode that touched the fixed init states would have failed with that error
    assert all(not e.get("error") for e in episodes["episodes"])
    # a second call reuses every evaluation (resumable) and picks the same snapshot
    again = select_snapshot(config)
    assert again["chosen"] == summary["chosen"] and again["curve"] == summary["curve"]
    # min_step: only the later snapshots are evaluated (here: reused), the choice among them
    late = select_snapshot(dataclasses.replace(config, min_step=2))
    assert [r["step"] for r in late["curve"]] == [2, 3] and late["scenes"]["min_step"] == 2
    with pytest.raises(ConfigError, match="no snapshot at or after step 9"):
        select_snapshot(dataclasses.replace(config, min_step=9))
