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
