"""One numpy-to-JSON converter (``embodied.io.json_default``, ``plain_json``): the output of the
conversions it replaced (HDF5 attributes, the tuning page, evaluation outcomes) is unchanged."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from embodied.apps.evaluation.worker import scalar_outcome
from embodied.io import json_default, plain_json, write_json

VALUES: dict[str, Any] = {
    "f64": np.float64(0.25),
    "f32": np.float32(1.5),
    "i64": np.int64(7),
    "u8": np.uint8(3),
    "bool": np.bool_(True),
    "str": np.str_("red"),
    "array": np.arange(4).reshape(2, 2),
    "empty": np.zeros(0),
    "path": Path("runs") / "x",
    "nested": {"a": (np.int32(1), [np.float16(0.5)]), "b": None, "c": "text"},
}


class Thing:
    """Neither numpy nor a path: the lenient conversion writes its ``str``."""

    def __str__(self) -> str:
        return "a thing"


def _old_hdf5(value: Any) -> Any:
    """``embodied/datasets/hdf5.py``'s former ``_jsonable``."""
    return json.loads(json.dumps(value, default=lambda o: getattr(o, "tolist", lambda: str(o))()))


def _old_tune(x: Any) -> Any:
    """``embodied/apps/tune/server.py``'s former ``_jsonable`` (scalars only)."""
    if isinstance(x, float):
        return x if x == x and x not in (float("inf"), float("-inf")) else None
    if isinstance(x, dict):
        return {str(k): _old_tune(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_old_tune(v) for v in x]
    if hasattr(x, "item") and callable(x.item):
        return _old_tune(x.item())
    return x


def _old_io(obj: Any) -> Any:
    """``embodied.io.json_default`` before it took anything with a ``tolist()``."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(type(obj).__name__)


def test_json_default_writes_what_the_old_converters_wrote() -> None:
    assert json.dumps(VALUES, default=json_default) == json.dumps(VALUES, default=_old_io)
    lenient = {**VALUES, "object": Thing()}
    assert json.dumps(plain_json(lenient, fallback=str)) == json.dumps(_old_hdf5(lenient))


def test_json_default_refuses_what_it_cannot_convert(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="not JSON serialisable: object"):
        json.dumps({"x": object()}, default=json_default)
    with pytest.raises(TypeError):
        write_json(tmp_path / "x.json", {"x": {1, 2}})
    assert not (tmp_path / "x.json").exists()


def test_plain_json_finite_is_the_tuning_pages_conversion() -> None:
    message = {
        "t": 0.1,
        "measurement": np.float64("nan"),
        "setpoint": float("inf"),
        "knob": np.float32(0.5),
        "episode": np.int64(3),
        "ok": np.bool_(False),
        "params": {"pid": {"kp": 2.0, "limits": (-1.0, np.float64(-np.inf))}},
        "files": ["a.yaml"],
    }
    converted = plain_json(message, finite=True)
    assert converted == _old_tune(message)
    assert json.dumps(converted, allow_nan=False) == json.dumps(_old_tune(message), allow_nan=False)
    assert converted["measurement"] is None and converted["params"]["pid"]["limits"][1] is None


def test_scalar_outcome_converts_numpy_scalars_as_before() -> None:
    info = {
        "success": True,
        "blocked": np.bool_(True),
        "steps": np.int16(4),
        "dist": np.float32(0.125),
        "name": np.str_("left"),
        "when": np.datetime64("2024-01-01T00:00:00.000000000"),
        "z": np.complex64(1j),
        "vec": np.zeros(3),
        "nan": float("nan"),
    }
    out = scalar_outcome(info)
    assert out == {
        "blocked": True,
        "dist": 0.125,
        "name": "left",
        "nan": out["nan"],
        "steps": 4,
    }
    assert math.isnan(out["nan"])
    assert [type(out[k]) for k in ("blocked", "dist", "name", "steps")] == [bool, float, str, int]


def _old_lerobot_writer(obj: Any) -> Any:
    """``embodied/datasets/lerobot/writer.py``'s former ``_json_default``."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    return str(obj)


def test_json_default_decodes_bytes_as_the_lerobot_writer_did() -> None:
    attrs = {
        **VALUES,
        "bytes": b"env \xff args",
        "np_bytes": np.bytes_(b"front"),
        "in_array": np.array([b"a", b"b"]),
        "object": Thing(),
    }
    assert json_default(b"caf\xc3\xa9") == "café"
    old = json.dumps(attrs, default=_old_lerobot_writer, ensure_ascii=False)
    assert json.dumps(plain_json(attrs, fallback=str), ensure_ascii=False) == old
