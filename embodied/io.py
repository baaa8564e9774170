"""Atomic file writes and checked reads.

Writes: a crash leaves either the old file or the new one, never half of one. Reads
(:func:`read_json_file`, :func:`parse_json_text`, :func:`load_safetensors_file`,
:func:`build_from_file`): a damaged or malformed file raises the project's error
(:class:`~embodied.errors.CheckpointError` by default) naming the file, what is wrong with it
and the fix, never a bare ``JSONDecodeError``/``SafetensorError`` traceback.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

from embodied.errors import CheckpointError, ConfigError, EmbodiedError

T = TypeVar("T")

DAMAGED_FIX = (
    "the file is damaged or incomplete; restore it, or re-create it with the tool that wrote it"
)
"""Default fix of a file that cannot be parsed."""


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], replace: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success, fsync and rename it onto ``path``.

    On an exception the temporary file is removed and ``path`` is left untouched.
    Temporary names end in ``.tmp`` so readers can skip them.

    Args:
        path: The file to write.
        replace: Replace an existing ``path``. With False the file is published with a hard
            link, which fails atomically if ``path`` exists (another writer got there first).

    Raises:
        FileExistsError: ``replace`` is False and ``path`` exists; it is left untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the usual permissions
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, target)
        else:
            _publish_new(tmp, target)
        with contextlib.suppress(OSError):  # make the rename durable where supported
            dir_fd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    finally:
        if tmp.exists():
            tmp.unlink()


def _publish_new(tmp: Path, target: Path) -> None:
    """Give ``tmp`` the name ``target`` unless ``target`` exists (then FileExistsError)."""
    try:
        os.link(tmp, target)  # atomic: fails with EEXIST instead of replacing
    except FileExistsError:
        raise
    except OSError as exc:
        # Filesystems without hard links (some FUSE/FAT/SMB mounts): check, then rename.
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
            raise
        if target.exists():
            raise FileExistsError(errno.EEXIST, "file exists", str(target)) from None
        os.replace(tmp, target)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


TEMP_NAME = re.compile(r"^\..+\.tmp$")
"""Names :func:`atomic_path` (and the folder writers built like it) give their temporaries."""


def remove_stale_temps(folder: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporaries a killed writer left in ``folder``; return what was removed.

    A process killed inside :func:`atomic_path` leaves its ``.NAME.XXXX.tmp`` file behind (the
    published files are whole). Commands that resume a folder they own call this first, so a
    kill costs no disk and no reader ever sees such a file. Only this folder is searched, not
    its subfolders.
    """
    root = Path(folder)
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for entry in root.iterdir():
        if not TEMP_NAME.match(entry.name):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def require_output_dir(path: str | os.PathLike[str], option: str = "--out") -> Path:
    """``path`` as an output folder: it may exist as a folder or not at all, never as a file.

    Commands call this before any work, so a wrong ``--out`` fails in a second with the fix,
    not after minutes of work with a traceback.

    Raises:
        ConfigError: ``path`` exists and is not a folder.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ConfigError(
            f"{option} {str(out)!r} is an existing file, not a folder",
            fix=f"pass a folder for {option} (a new name, or an existing output folder)",
        )
    return out


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Atomically write ``data`` as indented JSON (numpy values and paths by
    :func:`json_default`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=json_default) + "\n")


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Atomically write ``text``."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def json_default(obj: Any) -> Any:
    """``json.dumps(default=...)`` for numpy values and paths: the project's one converter.

    Numpy scalars become Python numbers and bools, numpy arrays (and anything else with a
    ``tolist()``, e.g. torch tensors) nested lists, paths strings, bytes (HDF5 attributes,
    ``np.bytes_``) text decoded as UTF-8 (undecodable bytes replaced).

    Raises:
        TypeError: any other object (as ``json.dumps`` itself would).
    """
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        return tolist()  # numpy: a scalar's tolist() is its item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def plain_json(
    value: Any, *, fallback: Callable[[Any], Any] | None = None, finite: bool = False
) -> Any:
    """``value`` as plain JSON data (dicts with string keys, lists, str, int, float, bool,
    None), converted as ``json.dumps(value, default=json_default)`` converts it.

    Args:
        value: Any JSON-able structure, numpy values and paths included.
        fallback: Converts what :func:`json_default` refuses (e.g. ``str``); None: a
            ``TypeError`` names it.
        finite: Replace non-finite floats (NaN, +-inf: not valid JSON, e.g. for a browser)
            with None.
    """

    def default(obj: Any) -> Any:
        try:
            return json_default(obj)
        except TypeError:
            if fallback is None:
                raise
            return fallback(obj)

    data = json.loads(json.dumps(value, default=default))
    return _finite(data) if finite else data


def _finite(value: Any) -> Any:
    """``value`` (plain JSON data) with its non-finite floats replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


# ---- checked reads -------------------------------------------------------------------------


def parse_json_text(
    text: str | bytes,
    source: str,
    *,
    what: str = "JSON",
    fix: str = DAMAGED_FIX,
    error: type[EmbodiedError] = CheckpointError,
    expect: type | None = dict,
) -> Any:
    """Parse JSON ``text`` read from ``source`` (a file, or ``file::attribute``).

    Args:
        text: The JSON text.
        source: Where the text comes from, for the message (e.g. a path).
        what: What the text is (e.g. ``"PDP config"``), for the message.
        fix: How to fix a bad text.
        error: The error class to raise.
        expect: Required type of the top-level value (None: any).

    Raises:
        EmbodiedError: ``error`` naming ``source``, the problem and ``fix``.
    """
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{what} {source!r} is not valid JSON ({exc})", fix=fix) from exc
    if expect is not None and not isinstance(value, expect):
        raise error(
            f"{what} {source!r} holds a JSON {type(value).__name__}, expected a "
            f"{'JSON object' if expect is dict else expect.__name__}",
            fix=fix,
        )
    return value


def read_json_file(
    path: str | os.PathLike[str],
    *,
    what: str = "JSON file",
    fix: str = DAMAGED_FIX,
    error: type[EmbodiedError] = CheckpointError,
    expect: type | None = dict,
) -> Any:
    """Read and parse the JSON file ``path`` (by default it must hold an object).

    Args:
        path: The file.
        what: What the file is (e.g. ``"RL controller config"``), for the message.
        fix: How to fix a missing, unreadable or malformed file.
        error: The error class to raise.
        expect: Required type of the top-level value (None: any).

    Raises:
        EmbodiedError: ``error`` naming the file, the problem and ``fix``.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise error(f"cannot read {what} {str(p)!r}: {exc.strerror or exc}", fix=fix) from exc
    return parse_json_text(raw, str(p), what=what, fix=fix, error=error, expect=expect)


def read_folder_config(
    folder: str | os.PathLike[str], *, what: str, fix: str, missing_fix: str | None = None
) -> dict[str, Any]:
    """The ``config.json`` object of a checkpoint folder (policies, judges, controllers).

    Args:
        folder: The folder.
        what: What the folder holds (e.g. ``"judge"``), for the messages.
        fix: How to fix a malformed ``config.json``.
        missing_fix: How to fix a folder without one (default: ``fix``).

    Raises:
        CheckpointError: no ``config.json``, or one that is unreadable or not a JSON object.
    """
    cfg = Path(folder) / "config.json"
    if not cfg.exists():
        raise CheckpointError(
            f"{what} folder {str(folder)!r} has no config.json", fix=missing_fix or fix
        )
    return dict(read_json_file(cfg, what=f"{what} config", fix=fix))


def load_safetensors_file(
    path: str | os.PathLike[str],
    *,
    what: str = "weights",
    fix: str = DAMAGED_FIX,
    framework: Literal["pt", "np"] = "pt",
    error: type[EmbodiedError] = CheckpointError,
) -> dict[str, Any]:
    """All tensors of the safetensors file ``path`` (torch tensors, or numpy with ``"np"``).

    Args:
        path: The file.
        what: What the file is (e.g. ``"PDP weights"``), for the message.
        fix: How to fix a missing, truncated or malformed file.
        framework: ``"pt"`` (torch tensors on CPU) or ``"np"`` (numpy arrays).
        error: The error class to raise.

    Raises:
        EmbodiedError: ``error`` naming the file, the problem and ``fix``.
    """
    from safetensors import SafetensorError

    p = Path(path)
    try:
        if framework == "np":
            from safetensors.numpy import load_file as load_np

            return dict(load_np(str(p)))
        from safetensors.torch import load_file as load_pt

        return dict(load_pt(str(p)))
    except FileNotFoundError as exc:
        raise error(f"{what} {str(p)!r} does not exist", fix=fix) from exc
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise _unreadable_safetensors(p, exc, what, fix, error) from exc


def _unreadable_safetensors(
    p: Path, exc: Exception, what: str, fix: str, error: type[EmbodiedError]
) -> EmbodiedError:
    return error(
        f"{what} {str(p)!r} is not a readable safetensors file (truncated or malformed: {exc})",
        fix=fix,
    )


def check_safetensors_file(
    path: str | os.PathLike[str],
    *,
    what: str = "weights",
    fix: str = DAMAGED_FIX,
    error: type[EmbodiedError] = CheckpointError,
) -> None:
    """Check that ``path``'s safetensors header is intact and covers the file (no tensor read).

    Raises:
        EmbodiedError: ``error`` naming the file, the problem and ``fix``.
    """
    from safetensors import SafetensorError, safe_open

    p = Path(path)
    try:
        with safe_open(str(p), framework="np"):
            pass
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise _unreadable_safetensors(p, exc, what, fix, error) from exc


DECLARED_SLACK = 4
"""How many times the bytes its weights store a config may declare (float32 built from
bfloat16 weights is 2x, plus buffers) before :func:`check_declared_size` refuses it."""
DECLARED_FLOOR = 64 * 2**20
"""Bytes a config may always declare (small models with large buffers)."""


def check_declared_size(
    declared: int,
    stored: int,
    path: str | os.PathLike[str],
    *,
    what: str,
    fix: str = DAMAGED_FIX,
    error: type[EmbodiedError] = CheckpointError,
) -> None:
    """Refuse a config that declares a model far larger than its weights.

    A damaged or edited ``config.json`` (a width of 2^40, a position table of 10^12 rows)
    would otherwise make the loader allocate it: out of memory, or the OOM killer, instead of
    an error. Build the model on the ``meta`` device (no memory) and pass its size here.

    Args:
        declared: Bytes of the parameters and buffers the config builds.
        stored: Bytes of the tensors in the weights files.
        path: The config file, for the message.
        what: What the model is.
        fix: How to repair the file.
        error: The error class to raise.

    Raises:
        EmbodiedError: ``declared`` above ``DECLARED_SLACK * stored + DECLARED_FLOOR``.
    """
    if declared > DECLARED_SLACK * stored + DECLARED_FLOOR:
        raise error(
            f"{str(path)!r} declares a {what} of {declared / 2**30:.3g} GiB, but its weights "
            f"hold {stored / 2**30:.3g} GiB",
            fix=fix,
        )


_STRUCTURE_KEY = re.compile(r"(layers?|blocks?|heads?|experts?)$")
_COUNT_KEY = re.compile(r"^(num|n)_")
MAX_STRUCTURE_COUNT = 4096
"""Largest count of layers, blocks, heads or experts a model config may declare: building a
model loops over them, so a damaged count of 10^12 would hang the loader, not allocate."""
MAX_COUNT = 10**6
"""Largest other ``num_*``/``n_*`` count (e.g. ``num_labels``, whose label table is built)."""


def check_config_counts(
    tree: Any,
    path: str | os.PathLike[str],
    *,
    what: str,
    fix: str = DAMAGED_FIX,
    error: type[EmbodiedError] = CheckpointError,
    _key: str = "",
) -> None:
    """Refuse a model config whose counts would make building the model loop for hours.

    A model is built on the ``meta`` device before loading (:func:`check_declared_size`), which
    costs no memory but still runs one Python iteration per layer: ``num_hidden_layers`` of
    10^12 in a damaged ``config.json`` would hang. Checks every integer of ``tree`` (nested
    dicts and lists) whose key names a layer, block, head or expert count against
    :data:`MAX_STRUCTURE_COUNT`, and other ``num_*``/``n_*`` counts against :data:`MAX_COUNT`.

    Raises:
        EmbodiedError: ``error`` naming the file, the dotted key and its value.
    """
    if isinstance(tree, dict):
        for k, v in tree.items():
            check_config_counts(
                v, path, what=what, fix=fix, error=error, _key=f"{_key}.{k}" if _key else str(k)
            )
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            check_config_counts(v, path, what=what, fix=fix, error=error, _key=f"{_key}[{i}]")
    elif isinstance(tree, int) and not isinstance(tree, bool) and _key:
        name = _key.rsplit(".", 1)[-1].split("[")[0]
        limit = (
            MAX_STRUCTURE_COUNT
            if _STRUCTURE_KEY.search(name)
            else MAX_COUNT
            if _COUNT_KEY.match(name)
            else None
        )
        if limit is not None and tree > limit:
            raise error(
                f"{what} {str(path)!r}: {_key}={tree} is beyond any model (at most {limit})",
                fix=fix,
            )


def module_bytes(module: Any) -> int:
    """Bytes of a torch module's parameters and buffers (also on the ``meta`` device)."""
    tensors = [*module.parameters(), *module.buffers()]
    return sum(int(t.numel()) * t.element_size() for t in tensors)


_MALFORMED = (
    TypeError,
    ValueError,
    AttributeError,
    RuntimeError,  # torch's load_state_dict / Generator.set_state on mismatched contents
    ArithmeticError,  # int() of JSON's Infinity; a zero size a model divides by
    IndexError,  # a list shorter than another part of the file says
)
"""What constructors raise on malformed file contents (:func:`build_from_file`)."""


def build_from_file(
    path: str | os.PathLike[str],
    build: Callable[[], T],
    *,
    what: str = "config",
    fix: str = DAMAGED_FIX,
    error: type[EmbodiedError] = CheckpointError,
) -> T:
    """``build()`` an object from the contents of ``path``; bad contents name the file.

    Turns what a constructor raises on malformed contents (wrong types or shapes, missing or
    unknown keys, a ``ConfigError``/``CheckpointError`` from validation) into ``error`` naming
    ``path``. Errors of other kinds, and errors that already name ``path``, pass unchanged.

    Raises:
        EmbodiedError: ``error`` naming the file, the problem and the fix.
    """
    try:
        return build()
    except EmbodiedError as exc:
        if str(path) in str(exc) or not isinstance(exc, ConfigError | CheckpointError | error):
            raise
        raise error(f"{what} {str(path)!r}: {_bare_message(exc)}", fix=exc.fix or fix) from exc
    except KeyError as exc:
        raise error(f"{what} {str(path)!r} lacks the key {exc}", fix=fix) from exc
    except _MALFORMED as exc:
        raise error(f"{what} {str(path)!r} has a malformed value: {exc}", fix=fix) from exc


def _bare_message(exc: EmbodiedError) -> str:
    """``exc``'s message without the ``(fix: ...)`` suffix its constructor appended."""
    text = str(exc)
    suffix = f" (fix: {exc.fix})" if exc.fix else ""
    return text[: -len(suffix)] if suffix and text.endswith(suffix) else text


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for servers a test or benchmark starts)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
