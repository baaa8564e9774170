"""Specs, knobs, registries and error messages."""

from __future__ import annotations

import numpy as np
import pytest

from embodied.contracts import Knob
from embodied.errors import ActionError, ConfigError, UnknownNameError
from embodied.registry import Registry
from embodied.specs import ImageSpec, ObservationSpec, VectorSpec


def test_vector_spec_validates_shape_and_finiteness() -> None:
    spec = VectorSpec(("vx", "vy"), (-1.0, -1.0), (1.0, 1.0), ("m/s", "m/s"))
    np.testing.assert_array_equal(spec.validate([0.5, -0.5]), [0.5, -0.5])
    with pytest.raises(ActionError, match=r"shape \(3,\).*\('vx', 'vy'\)"):
        spec.validate([1, 2, 3])
    with pytest.raises(ActionError, match=r"'vy': inf"):
        spec.validate([0.0, np.inf])
    np.testing.assert_array_equal(spec.clip(np.array([2.0, -3.0])), [1.0, -1.0])
    assert VectorSpec.from_dict(spec.to_dict()) == spec


def test_vector_spec_rejects_inconsistent_definitions() -> None:
    with pytest.raises(ConfigError, match=r"units=\('m',\) has 1 entries"):
        VectorSpec(("a", "b"), (0, 0), (1, 1), ("m",))
    with pytest.raises(ConfigError, match=r"low > high.*'a'"):
        VectorSpec(("a",), (2.0,), (1.0,), ("m",))


def test_observation_spec_checks_images() -> None:
    spec = ObservationSpec(VectorSpec.uniform(["x"], -1, 1, "m"), {"front": ImageSpec(8, 8)})
    good = {"state": np.zeros(1), "image.front": np.zeros((8, 8, 3), np.uint8), "instruction": ""}
    spec.validate(good)
    with pytest.raises(ConfigError, match="image.front is float64"):
        spec.validate({**good, "image.front": np.zeros((8, 8, 3))})
    with pytest.raises(ConfigError, match="lacks 'image.front'"):
        spec.validate({"state": np.zeros(1)})


def test_knob_bounds() -> None:
    z = Knob("z", (-3.0, -3.0), (3.0, 3.0), (0.0, 0.0))
    assert z.validate([1.0, 2.0]).tolist() == [1.0, 2.0]
    with pytest.raises(ConfigError, match="takes 2 value"):
        z.validate(1.0)
    with pytest.raises(ConfigError, match=r"default=\(5.0,\) outside"):
        Knob.scalar("a", 0.0, 1.0, 5.0)


def test_registry_lists_known_names_on_typo() -> None:
    reg: Registry[int] = Registry("widget")
    reg.register("one", lambda: 1)

    @reg.register("two")
    def two() -> int:
        """Makes two."""
        return 2

    assert reg.make("two") == 2 and reg.help("two") == "Makes two."
    with pytest.raises(UnknownNameError, match=r"unknown widget 'tow'; known: one, two"):
        reg.make("tow")
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("one", lambda: 3)


def test_registry_reports_missing_optional_plugins() -> None:
    reg: Registry[int] = Registry("widget", plugins=("embodied_no_such_module",))
    assert reg.names() == []
    assert "embodied_no_such_module" in reg.unavailable()
