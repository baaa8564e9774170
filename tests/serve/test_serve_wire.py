"""The wire format against openpi's own msgpack_numpy (openpi-client 0.1.2), both directions."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

from embodied.wire import WireError, packb, text_keys, unpackb

ARRAYS = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.linspace(-1, 1, 7),  # float64
    np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3),
    np.array([True, False]),
    np.array([-3, 4], dtype=np.int16),
    np.zeros((0, 7), dtype=np.float32),
    np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),  # sent in C order
]


def _message() -> dict[str, object]:
    return {
        "observation/image": np.full((4, 4, 3), 7, dtype=np.uint8),
        "observation/state": np.array([0.1, -0.2], dtype=np.float64),
        "prompt": "pick up the ketchup",
        "nested": {"a": [1, 2.5, "x"], "b": np.float32(1.5), "c": np.int64(3)},
        "arrays": ARRAYS,
    }


def _equal(a: object, b: object) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b)
        for k in a:
            _equal(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _equal(x, y)
    elif isinstance(a, (np.ndarray, np.generic)):
        assert isinstance(b, type(a)), (type(a), type(b))
        assert np.asarray(b).dtype == np.asarray(a).dtype
        np.testing.assert_array_equal(b, a)
    else:
        assert a == b


def test_our_bytes_are_openpis_bytes(openpi_client: ModuleType) -> None:
    from openpi_client import msgpack_numpy

    message = _message()
    ours = packb(message)
    assert ours == msgpack_numpy.packb(message)
    assert ours == msgpack_numpy.Packer().pack(message)  # what openpi's client and server send
    _equal(message, msgpack_numpy.unpackb(ours))  # openpi reads what we write


def test_we_read_what_openpi_writes(openpi_client: ModuleType) -> None:
    from openpi_client import msgpack_numpy

    message = _message()
    back = unpackb(msgpack_numpy.packb(message))
    _equal(message, back)
    back["observation/image"][0, 0, 0] = 1  # writable: a processor may normalise in place


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (np.array(["a"], dtype=object), "dtype object"),
        (np.array([1 + 2j]), "dtype complex128"),
        (object(), "cannot send a object"),
    ],
)
def test_refuses_to_pack_what_openpi_refuses(value: object, match: str) -> None:
    with pytest.raises(WireError, match=match):
        packb({"x": value})


def _array_map(**fields: object) -> bytes:
    import msgpack

    base: dict[bytes, object] = {
        b"__ndarray__": True,
        b"data": b"\x00" * 8,
        b"dtype": "<f4",
        b"shape": (2,),
    }
    base.update({k.encode(): v for k, v in fields.items()})
    return msgpack.packb({"x": base})  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\xc1", "not valid msgpack"),
        (b"\x92\x01", "not valid msgpack"),  # truncated list
        (_array_map(shape=(3,)), "needs 12 bytes, the message holds 8"),
        (_array_map(dtype="|O"), "not allowed on the wire"),
        (_array_map(dtype="<U2"), "not allowed on the wire"),
        (_array_map(dtype="nonsense"), "not a numpy dtype"),
        (_array_map(shape=(-1,)), "non-negative ints"),
        (_array_map(data="text"), "needs bytes 'data'"),
    ],
)
def test_bad_messages_are_named(data: bytes, match: str) -> None:
    with pytest.raises(WireError, match=match):
        unpackb(data)


def test_limits_on_size_depth_and_type() -> None:
    with pytest.raises(WireError, match="over the limit of 10 bytes"):
        unpackb(packb({"x": np.zeros(8)}), max_bytes=10)
    deep: object = 1
    for _ in range(12):
        deep = [deep]
    with pytest.raises(WireError, match="deeper than"):
        unpackb(packb(deep))
    with pytest.raises(WireError, match="not text"):
        unpackb("a text frame")  # type: ignore[arg-type]
    assert text_keys({b"prompt": "x", "state": 1}) == {"prompt": "x", "state": 1}
    with pytest.raises(WireError, match="not a string"):
        text_keys({3: "x"})
