"""The tuning page's charting library is the vendored uPlot release named in its README, served
from the package (no CDN): the page loads nothing from another origin."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

STATIC = Path(__file__).resolve().parents[2] / "embodied" / "apps" / "tune" / "static"


def test_vendored_files_are_the_named_release() -> None:
    readme = (STATIC / "vendor" / "README.md").read_text(encoding="utf-8")
    assert "1.6.32" in readme and "MIT" in readme
    for name in ("uPlot.iife.min.js", "uPlot.min.css"):
        digest = hashlib.sha256((STATIC / "vendor" / name).read_bytes()).hexdigest()
        assert f"`{name}` {digest}" in readme.replace("\n", " "), f"{name} differs from README"
    assert (STATIC / "vendor" / "uPlot.LICENSE.txt").read_text().startswith("The MIT License")


def test_the_page_loads_only_its_own_files() -> None:
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert "static/vendor/uPlot.iife.min.js" in refs and "static/vendor/uPlot.min.css" in refs
    assert all(not re.match(r"^(https?:)?//", r) for r in refs), refs
    for js in STATIC.glob("*.js"):
        assert not re.search(r"https?://(?!127\.0\.0\.1|localhost)", js.read_text()), js.name
