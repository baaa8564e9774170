"""A bag recorded by ROS 1's own ``rosbag record`` while ``embodied deploy`` drives the test
robot node through the real rosbridge_server imports as the node saw the session: its actions
are the commands the node received, its states the joint states the node published."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from embodied.apps.deploy import DeployConfig, deploy
from embodied.datasets import Dataset
from embodied.datasets.bags import import_bag, load_mapping
from hardware import DEFAULT_CONFIG
from hardware.ros.testing import RosTestGraph, ros_available

pytestmark = pytest.mark.ros

MAPPING = """
clock: /arm/command              # one control step per command the driver sent
max_skew_s: 0.2
state: {topic: /joint_states, field: position, align: previous}
action: {topic: /arm/command, field: "points[0].positions", align: nearest}
instruction: {text: wave}
episodes: {split: gap, gap_s: 1.0}
"""


def _is_subsequence(short: list[tuple[float, ...]], long: list[tuple[float, ...]]) -> bool:
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


def test_rosbag_record_of_a_deploy_imports_as_the_node_saw_it(tmp_path: Path) -> None:
    why = ros_available()
    if why is not None:
        pytest.fail(f"{why}; or deselect these tests with -m 'not ros'")
    graph = RosTestGraph(DEFAULT_CONFIG, workdir=tmp_path / "graph", log_states=True)
    graph.start()
    bag = tmp_path / "session.bag"
    try:
        graph.record_bag(bag, ["/joint_states", "/arm/command"])
        result = deploy(
            graph.robot_config(),
            DeployConfig("sine", max_seconds=2.0, policy_kwargs={"amplitude_rad": 0.3}),
            tmp_path / "deploy",
        )
        assert result.reason == "max_steps", result
        graph.stop_bag()
    finally:
        log = graph.commands()
        graph.stop()
    assert bag.exists(), "rosbag record left no bag"
    mapping = tmp_path / "map.yaml"
    mapping.write_text(MAPPING)
    imported = import_bag(bag, tmp_path / "data", load_mapping(mapping))
    ds = Dataset(tmp_path / "data")
    actions = [tuple(a) for e in ds for a in e.actions]
    states = [tuple(s) for e in ds for s in e.obs["state"]]
    # every command that reached the node: executed, or dropped as too old on a loaded machine
    received = [tuple(c["positions"]) for c in log if c["kind"] in ("command", "expired")]
    published = {tuple(c["position"]) for c in log if c["kind"] == "state"}
    # the bag and the node are two subscribers of /arm/command: each may miss the few commands
    # sent before its own connection came up (ROS 1 keeps no backlog), never one after it
    assert imported.steps == len(actions) >= 0.8 * len(received) > 20
    heard = set(received)
    early = [i for i, a in enumerate(actions) if a not in heard]
    assert early == list(range(len(early))) and len(early) <= 5, early
    # every other command in the bag reached the node, in order
    assert _is_subsequence(actions[len(early) :], received)
    # every state is one the node published (exactly), the newest before its command
    assert all(s in published for s in states)
    assert ds.env_args["observation"]["state"]["names"] == [
        j.name for j in graph.robot_config().joints
    ]
    # and a policy trains on it
    from policies.diffusion.training_pdp import train_pdp
    from tests.diffusion.conftest import tiny_config

    cfg = tiny_config(steps=2, batch_size=4, z_dim=0)
    train_pdp(tmp_path / "data", tmp_path / "policy", cfg, progress=False, tensorboard=False)
    assert np.isfinite(np.concatenate([e.actions for e in ds])).all()
    assert (tmp_path / "policy" / "model.safetensors").exists()
