"""Test helper: put a LIBERO sim into a state that satisfies its task's BDDL goal.

Objects named by ``on``/``in`` goals are placed just above their target (object or region)
and articulated regions named by ``open``/``close`` goals get their joints set inside the
open/close ranges LIBERO's predicates check. The env is then stepped with real physics, so
the success signal comes from LIBERO's own goal check, through our adapter.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _target_pos(inner: Any, target: str) -> np.ndarray:
    state = inner.object_states_dict[target]
    return np.array(state.get_geom_state()["pos"], dtype=np.float64)


def force_goal(inner: Any) -> list[str]:
    """Edit ``inner`` (LIBERO's robosuite env) toward its goal; returns what was changed."""
    sim = inner.sim
    changed = []
    for pred, *args in inner.parsed_problem["goal_state"]:
        if pred in ("on", "in"):
            obj, target = args
            pos = _target_pos(inner, target)
            joint = inner.get_object(obj).joints[-1]
            qpos = np.array(sim.data.get_joint_qpos(joint), dtype=np.float64)
            qpos[:3] = pos + np.array([0.0, 0.0, 0.06 if pred == "on" else 0.02])
            sim.data.set_joint_qpos(joint, qpos)
            sim.data.set_joint_qvel(joint, np.zeros(6))
            changed.append(f"{obj}->{target}")
        elif pred in ("open", "close"):
            (region,) = args
            site = inner.object_sites_dict[region]
            parent = inner.get_object(site.parent_name)
            ranges = parent.object_properties["articulation"]
            rng = ranges["default_open_ranges" if pred == "open" else "default_close_ranges"]
            q = float(np.mean(rng)) if pred == "open" else float(max(rng))  # drawers drift open
            for joint in site.joints:
                sim.data.set_joint_qpos(joint, q)
            changed.append(f"{pred} {region}")
        else:
            raise NotImplementedError(f"goal predicate {pred!r}")
    sim.forward()
    return changed
