"""The README's Python example runs as written, and its two set-up commands are the real ones.

The command, entry-point and image checks cover README.md and every page of the documentation
site (``docs/**/*.md``, built by ``tests/core/test_core_docs.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import documentation_files

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
FILES = documentation_files()
"""README.md, then the documentation pages."""


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_readme_python_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks, "README lost its Python example"
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    episode = namespace["episode"]
    assert episode.success  # type: ignore[attr-defined]
    assert not __import__("numpy").isnan(episode.measurements).any()  # type: ignore[attr-defined]


def test_readme_has_exactly_the_two_setup_commands_and_ci_uses_one() -> None:
    setup = re.findall(r"^python3 -m embodied\.bootstrap (\w+)", README, flags=re.M)
    assert setup == ["demo", "test"]
    assert "python3 -m embodied.bootstrap test" in (ROOT / ".ci" / "run").read_text()


def _readme_commands(text: str = README) -> list[tuple[list[str], list[str]]]:
    """(command words, option names) of every inline ``embodied ...`` example in ``text``."""
    out = []
    for cell in re.findall(r"`(embodied [^`]+)`", text):
        words = cell.replace("[", " ").replace("]", " ").split()[1:]
        path = []
        for w in words:
            if w.startswith(("-", "<")) or w == "...":
                break
            path.append(w)
        options = [w.split("=")[0] for w in words if w.startswith("--")]
        out.append((path, options))
    return out


def test_every_readme_command_exists_with_its_options() -> None:
    """Each ``embodied ...`` command of the README and the documentation pages resolves, and
    its help lists its options."""
    from typer.testing import CliRunner

    from embodied.apps.cli import app

    commands = {
        (tuple(path), option): _name(file)
        for file in FILES
        for path, options in _readme_commands(file.read_text(encoding="utf-8"))
        for option in [None, *options]
    }
    assert len({path for path, _ in commands}) >= 14, commands
    helps: dict[tuple[str, ...], str] = {}
    for (path, option), file in commands.items():
        if path not in helps:
            result = CliRunner().invoke(
                app, [*path, "--help"], terminal_width=200, env={"COLUMNS": "200"}
            )
            assert result.exit_code == 0, (file, path, result.output)
            helps[path] = result.output
        if option is not None:
            assert option in helps[path], (file, path, option, helps[path])


def test_readme_python_module_commands_run() -> None:
    """One entry point: the README's only ``python -m`` commands are the installer and the
    CLI itself (``embodied.bootstrap``, ``embodied``), the documentation pages run no other,
    and each accepts ``--help``."""
    import subprocess
    import sys

    modules = set(re.findall(r"python3? -m ([\w.]+)", README))
    assert modules == {"embodied.bootstrap", "embodied"}, modules
    for file in FILES[1:]:
        found = set(re.findall(r"python3? -m ([\w.]+)", file.read_text(encoding="utf-8")))
        assert found <= modules, (_name(file), found - modules)
    for module in sorted(modules):
        proc = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, (module, proc.stdout[-2000:], proc.stderr[-2000:])


def test_readme_images_exist_and_are_pngs() -> None:
    """Every image of the README and the documentation pages exists, relative to the file
    that shows it, and is a PNG."""
    assert re.search(r"!\[[^\]]*\]\(", README), "README shows no image (the tuning page screenshot)"
    shown = 0
    for file in FILES:
        for rel in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", file.read_text(encoding="utf-8")):
            path = file.parent / rel
            assert path.is_file(), f"{_name(file)}: image {rel} is missing"
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", (
                f"{_name(file)}: {rel} is not a PNG"
            )
            shown += 1
    assert shown >= 2, "the tuning page screenshot is shown by README and docs/tuning.md"


def test_readme_and_changelog_links_resolve() -> None:
    """Each relative link of README.md and CHANGELOG.md names a file of the checkout, and an
    anchor into a documentation page names one of its headings. (The documentation pages'
    own links are checked by ``mkdocs build --strict``.)"""
    for file in (ROOT / "README.md", ROOT / "CHANGELOG.md"):
        text = file.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):  # https://...
                continue
            rel, _, anchor = target.partition("#")
            path = file.parent / rel
            assert path.exists(), f"{_name(file)} links to {target}, which does not exist"
            if anchor and path.suffix == ".md":
                assert anchor in _anchors(path.read_text(encoding="utf-8")), (
                    f"{_name(file)} links to {target}: no heading gives #{anchor}"
                )


def _anchors(markdown: str) -> set[str]:
    """The ids MkDocs' table of contents gives the headings (its default slugify)."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, flags=re.M):
        slug = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
        out.add(re.sub(r"[-\s]+", "-", slug))
    return out
