"""Shared test setup: headless GL, one torch thread, paths to shared data and artifacts.

Optional extras (ray, accelerate, robosuite, playwright) are required per test with
:func:`require`, never by a module-level ``pytest.importorskip``: a missing extra skips only
the tests that use it. Under ``EMBODIED_REQUIRE_EXTRAS=1`` (set by ``.ci/run``) a missing
extra fails the test instead, and so does any other skip, so CI cannot pass by skipping.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# pytester runs small test files in a temporary folder (tests/core/test_core_require_extras.py)
pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
ARTIFACTS = ROOT / "test-artifacts"
DOCS = ROOT / "docs"
REQUIRE_EXTRAS_VAR = "EMBODIED_REQUIRE_EXTRAS"
EXTRA_OF = {
    "ray": "dist",
    "accelerate": "dist",
    "robosuite": "robosuite",
    "playwright": "ui",
    "minatar": "rl",
    "foxglove": "ros",
    "mkdocs": "dev",
    "material": "dev",
    "mkdocstrings": "dev",
    "mkdocstrings_handlers": "dev",
    "openpi_client": "python -m embodied.bootstrap test installs it (pip --no-deps)",
}
"""Which ``pip install -e .[extra]`` provides each optional top-level module."""


def documentation_files() -> list[Path]:
    """README.md, then every page of the documentation site (``docs/**/*.md``, sorted).

    The files whose commands, images and links the README tests check
    (``tests/core/test_core_readme.py``, ``tests/cli/test_cli_readme.py``).
    """
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def extras_required() -> bool:
    """True when ``EMBODIED_REQUIRE_EXTRAS`` is set to anything but empty/``0``: skips fail."""
    return os.environ.get(REQUIRE_EXTRAS_VAR, "").strip() not in ("", "0")


def require(module: str) -> ModuleType:
    """Import an optional dependency for the calling test, or skip that test.

    Call it inside the test or fixture that needs the module, so a missing extra drops only
    those tests. Under ``EMBODIED_REQUIRE_EXTRAS=1`` the missing module fails the test.

    Args:
        module: Dotted module name, e.g. ``"ray"`` or ``"playwright.sync_api"``.

    Returns:
        The imported module.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        error = exc
    # outside the except block, so the report shows one message instead of a chained traceback
    extra = EXTRA_OF.get(module.split(".")[0])
    hint = f"pip install -e '.[{extra}]'" if extra else f"install {module.split('.')[0]}"
    if extra and " " in extra:  # not an extra: how it is installed
        hint = extra
    reason = f"{module} is not installed ({error}); {hint}"
    if extras_required():
        pytest.fail(
            f"{reason}. {REQUIRE_EXTRAS_VAR}=1: a missing dependency is a failure", pytrace=False
        )
    pytest.skip(reason)


FUZZ_PROFILE = os.environ.get("EMBODIED_FUZZ_PROFILE", "ci")
"""``ci`` (default: few cases, derandomized, so CI sees the same cases every run) or ``slow``
(ten times as many, random): the size of the fault-fuzzing tests."""


def fuzz_settings(ci: int = 20, slow: int = 200) -> Any:
    """hypothesis settings of a fault-fuzzing test under :data:`FUZZ_PROFILE`.

    No deadline (a case may start processes), no example database (nothing written into the
    work tree) and every health check off (the cases are slow and use function fixtures).

    Args:
        ci: Cases per test under the ``ci`` profile.
        slow: Cases per test under the ``slow`` profile.
    """
    hypothesis = require("hypothesis")
    if FUZZ_PROFILE not in ("ci", "slow"):
        raise pytest.UsageError(
            f"EMBODIED_FUZZ_PROFILE={FUZZ_PROFILE!r} is not a profile; use 'ci' or 'slow'"
        )
    return hypothesis.settings(
        max_examples=ci if FUZZ_PROFILE == "ci" else slow,
        derandomize=FUZZ_PROFILE == "ci",
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=list(hypothesis.HealthCheck),
    )


def pytest_configure(config: pytest.Config) -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def _sb3_logs_in_basetemp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """SB3 models built without a logger make an empty ``$TMPDIR/SB3-<time>`` folder per
    ``learn()``; point them (and the commands tests start) at the session's temporary tree."""
    old = os.environ.get("SB3_LOGDIR")
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3"))
    yield
    if old is None:
        os.environ.pop("SB3_LOGDIR", None)
    else:
        os.environ["SB3_LOGDIR"] = old


SLOW_PROFILE_TIMEOUT_S = 7200
"""Per-test timeout (s) under the ``slow`` fuzz profile: ten times the cases of ``ci`` (a
kill test runs 200 killed commands) do not fit the suite's 600 s per test."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if FUZZ_PROFILE == "slow":
        for item in items:
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(SLOW_PROFILE_TIMEOUT_S))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Under ``EMBODIED_REQUIRE_EXTRAS`` turn every skip (skip marks, ``pytest.skip``,
    ``importorskip``) into a failure; expected failures (xfail) keep their outcome."""
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and extras_required():
        report.outcome = "failed"
        report.longrepr = f"{REQUIRE_EXTRAS_VAR}=1 forbids skips: {_skip_reason(report)}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """Same for a whole module skipped at import (a module-level ``importorskip``)."""
    report = yield
    if report.skipped and extras_required():
        report.outcome = "failed"
        report.longrepr = f"{REQUIRE_EXTRAS_VAR}=1 forbids skips: {_skip_reason(report)}"
    return report


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])  # (path, line, "Skipped: reason")
    return str(longrepr)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The read-only ``../shared`` folder beside the checkout (LIBERO assets, ...)."""
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing: tests need the shared data folder beside the checkout")
    return SHARED


@pytest.fixture(scope="module")
def libero_assets(shared_dir: Path) -> Iterator[Path]:
    """Point LIBERO at ../shared/libero-assets for one test module (tests never use the hub).

    Use with ``pytestmark = [pytest.mark.libero, pytest.mark.usefixtures("libero_assets")]``.
    """
    require("libero")
    assets = shared_dir / "libero-assets"
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBODIED_LIBERO_ASSETS", str(assets))
    yield assets
    mp.undo()


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Folder for test artifacts worth keeping (screenshots, plots, videos)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def cli_exit2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str
) -> str:
    """Run ``embodied ARGV`` as the console script does; assert exit 2 with one error line and
    no traceback; return the message (whitespace collapsed)."""
    import sys

    from embodied.apps.cli import main

    monkeypatch.setattr(sys, "argv", ["embodied", *argv])
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert "Traceback" not in err
    return " ".join(err.split())
