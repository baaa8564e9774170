"""The README's Python example runs as written, and its two set-up commands are the real ones."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


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


def _readme_commands() -> list[tuple[list[str], list[str]]]:
    """(command words, option names) of every ``embodied ...`` example in README's tables."""
    out = []
    for cell in re.findall(r"`(embodied [^`]+)`", README):
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
    """Each ``embodied ...`` command of the README resolves, and its help lists its options."""
    from typer.testing import CliRunner

    from embodied.apps.cli import app

    commands = _readme_commands()
    assert len(commands) >= 14, commands
    for path, options in commands:
        result = CliRunner().invoke(
            app, [*path, "--help"], terminal_width=200, env={"COLUMNS": "200"}
        )
        assert result.exit_code == 0, (path, result.output)
        for option in options:
            assert option in result.output, (path, option, result.output)


def test_readme_python_module_commands_run() -> None:
    """One entry point: the README's only ``python -m`` commands are the installer and the
    CLI itself (``embodied.bootstrap``, ``embodied``), and each accepts ``--help``."""
    import subprocess
    import sys

    modules = set(re.findall(r"python3? -m ([\w.]+)", README))
    assert modules == {"embodied.bootstrap", "embodied"}, modules
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
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", README)
    assert images, "README shows no image (the tuning page screenshot)"
    for rel in images:
        path = ROOT / rel
        assert path.is_file(), f"README image {rel} is missing"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{rel} is not a PNG"
