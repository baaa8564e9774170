"""Three layers, one direction, no cycles: the import-linter contracts in ``pyproject.toml``.

* ``layers``: applications (``embodied.apps``) > components (``sim``, ``policies``,
  ``controllers``, ``hardware``, ``embodied.rewards``) > core (the rest of ``embodied``).
* ``components``: no component imports another.
* ``lab``: no product application imports the lab (``embodied.apps.lab``, the paper
  reproductions of ``embodied lab``); the lab may import the product.
* ``acyclic``: no import cycle between sibling modules or subpackages, at any depth.

The contracts are checked on the real tree, every module must belong to exactly one layer (a
new core module must be added to the core layer, or it would escape the rules), every module of
``embodied.apps`` must be the lab or one of the ``lab`` contract's product modules, and copies
of the tree with one deliberate upward import, or one product import of the lab, must break
their contract, so the checks can fail.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("embodied", "sim", "policies", "controllers", "hardware")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(lint), "--no-cache", str(root / "pyproject.toml")],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def _layer_modules() -> list[list[str]]:
    layers = _contracts()["layers"]["layers"]
    assert isinstance(layers, list)
    return [[m.strip() for m in layer.replace("|", ":").split(":")] for layer in layers]


def test_contracts_hold_on_the_tree() -> None:
    proc = _lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "4 kept, 0 broken" in proc.stdout, proc.stdout[-3000:]


def test_every_module_is_in_exactly_one_layer() -> None:
    """Top-level packages and every direct child of ``embodied`` belong to one layer."""
    layers = _layer_modules()
    flat = [m for layer in layers for m in layer]
    assert len(flat) == len(set(flat)), flat
    expected = {p for p in PACKAGES if p != "embodied"}
    for child in (ROOT / "embodied").iterdir():
        if child.name.startswith(("_", ".")) and child.name != "__main__.py":
            continue
        if child.is_dir() and (child / "__init__.py").exists():
            expected.add(f"embodied.{child.name}")
        elif child.suffix == ".py":
            expected.add(f"embodied.{child.stem}")
    assert set(flat) == expected, (
        f"in no layer: {sorted(expected - set(flat))}; not a module: {sorted(set(flat) - expected)}"
    )
    assert layers[0] == ["embodied.apps", "embodied.__main__"]  # applications on top


def test_every_application_is_product_or_lab() -> None:
    """Each direct child of ``embodied.apps`` is the lab or a source module of the ``lab``
    contract (a new product module must be listed, or it could import the lab unchecked)."""
    contract = _contracts()["lab"]
    assert contract["forbidden_modules"] == ["embodied.apps.lab"]
    sources = set(contract["source_modules"])  # type: ignore[call-overload]
    apps = ROOT / "embodied" / "apps"
    children = {
        f"embodied.apps.{child.stem}"
        for child in apps.iterdir()
        if not child.name.startswith(("_", "."))
        and ((child.is_dir() and (child / "__init__.py").exists()) or child.suffix == ".py")
    }
    product = children - {"embodied.apps.lab"}
    assert "embodied.apps.lab" in children
    assert sources == product | {"embodied.__main__"}, (
        f"not in the lab contract: {sorted(product - sources)}; "
        f"not a module: {sorted(sources - product - {'embodied.__main__'})}"
    )


def _tree_copy(tmp_path: Path) -> Path:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    """A component that imports an application (here ``sim`` -> ``embodied.apps.cli``) fails."""
    _tree_copy(tmp_path)
    assert "applications > components > core KEPT" in _lint_imports(tmp_path).stdout
    init = tmp_path / "sim" / "__init__.py"
    init.write_text(init.read_text() + "\nimport embodied.apps.cli  # deliberate violation\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "applications > components > core BROKEN" in proc.stdout, proc.stdout[-3000:]
    assert "sim -> embodied.apps.cli" in proc.stdout, proc.stdout[-3000:]


def test_a_product_import_of_the_lab_breaks_the_contract(tmp_path: Path) -> None:
    """A product module that imports the lab (here ``embodied.apps.cli.cmd_train`` ->
    ``embodied.apps.lab.stats``) fails the ``lab`` contract; the lab importing the product
    (``embodied.apps.lab.cli`` -> ``embodied.apps.cli``) does not."""
    _tree_copy(tmp_path)
    module = tmp_path / "embodied" / "apps" / "cli" / "cmd_train.py"
    module.write_text(module.read_text() + "\nimport embodied.apps.lab.stats  # deliberate\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "the product never imports the lab BROKEN" in proc.stdout, proc.stdout[-3000:]
    assert "embodied.apps.cli.cmd_train -> embodied.apps.lab.stats" in proc.stdout, proc.stdout[
        -3000:
    ]
