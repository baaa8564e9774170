"""The documentation site builds with ``mkdocs build --strict``, and every page is in its nav.

Strict mode fails on any warning: a broken link or anchor between pages, a page left out of
the nav, or a docstring mkdocstrings cannot render in the API reference. The commands, images
and ``python -m`` lines of the pages are checked with the README's
(``tests/core/test_core_readme.py``, ``tests/cli/test_cli_readme.py``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import DOCS, ROOT, require

CONFIG = ROOT / "mkdocs.yml"


def _nav_pages(nav: object) -> list[str]:
    """The page paths of a MkDocs ``nav`` (nested lists of ``{title: page or list}``)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def test_every_docs_page_is_in_the_nav() -> None:
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    nav = _nav_pages(config["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages, (sorted(set(pages) - set(nav)), sorted(set(nav) - set(pages)))


OPTIONAL = (
    "robosuite",
    "libero",
    "bddl",
    "roslibpy",
    "foxglove",
    "starlette",
    "uvicorn",
    "ray",
    "accelerate",
    "stormpy",
    "ltlf2dfa",
    "sb3_contrib",
    "minatar",
    "playwright",
)
"""Top-level modules of the optional extras (``pyproject.toml``), hidden from the import check."""

BLOCKED_IMPORT = """
import importlib, sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {optional!r}:
            raise ImportError(name + " is an optional extra")
sys.meta_path.insert(0, Blocked())
for module in {modules!r}:
    importlib.import_module(module)
"""


def test_api_reference_modules_import_without_extras() -> None:
    """The API reference documents only modules that import with every optional extra hidden
    (the build reads the source statically, so it would not notice an import that fails)."""
    modules = [
        module
        for page in sorted((DOCS / "api").glob("*.md"))
        for module in re.findall(r"^::: ([\w.]+)", page.read_text(encoding="utf-8"), flags=re.M)
    ]
    roots = {"embodied", "policies", "controllers", "sim", "hardware"}
    assert {m.split(".")[0] for m in modules} == roots, modules
    code = BLOCKED_IMPORT.format(optional=set(OPTIONAL), modules=modules)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    require("mkdocs")
    require("material")
    require("mkdocstrings_handlers.python")
    site = tmp_path / "site"
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(CONFIG)]
    proc = subprocess.run(
        [*build, "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        # the Material theme's banner about MkDocs 2.0 is noise here
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    assert (site / "index.html").is_file()
    assert (site / "images" / "tune_page.png").is_file()
    # the API reference is rendered from the docstrings, not left as ::: directives
    api = (site / "api" / "embodied" / "index.html").read_text(encoding="utf-8")
    assert "rollout" in api and ":::" not in api
    for page in DOCS.rglob("*.md"):  # directory URLs: a/b.md -> a/b/index.html
        rel = page.relative_to(DOCS).with_suffix("")
        folder = rel.parent if rel.name == "index" else rel
        html = site / folder / "index.html"
        assert html.is_file(), f"{page.relative_to(ROOT)} was not built ({html})"
