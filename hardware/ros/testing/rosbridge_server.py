"""Launch the real upstream ``rosbridge_server`` (rosbridge_suite 0.11.17, ROS 1) for tests.

The server's source lives, unmodified and read-only, in ``../shared/rosbridge_suite`` beside
the checkout (override with ``EMBODIED_ROSBRIDGE_SUITE``); see its README.md. Debian ships no
package for it, so :func:`prepare` builds what it needs in a scratch folder:

* Python modules for ``rosbridge_msgs`` (msg) and ``rosauth`` (srv), generated with genpy;
* minimal ``package.xml`` files for every message package the server may load, on
  ``ROS_PACKAGE_PATH``: the server loads message classes through
  ``roslib.launcher.load_manifest``, i.e. through rospack, and Debian installs no manifests;
* ``PYTHONPATH`` with the generated modules, ``rosbridge_library/src`` and
  ``rosbridge_server/src``.

:meth:`RosbridgeSetup.argv` is the command line of ``rosbridge_websocket.py`` bound to
127.0.0.1 and a given port; the caller (:class:`hardware.ros.testing.RosTestGraph`) runs it in a
process group of its own and waits with :func:`wait_websocket` until the websocket handshake
succeeds. Extra Debian packages: :data:`APT_PACKAGES`.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from embodied.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
SUITE_VAR = "EMBODIED_ROSBRIDGE_SUITE"
GENPY_DIR = Path("/usr/lib/genpy")
DIST_PACKAGES = Path("/usr/lib/python3/dist-packages")
APT_PACKAGES = "python3-twisted python3-autobahn python3-tornado python3-bson python3-pil"
"""What ``rosbridge_websocket.py`` imports beyond ROS core and rospy (Debian 12 names)."""
SERVER_MODULES = "twisted, autobahn, tornado, bson, PIL, genpy"
"""Modules :data:`APT_PACKAGES` (and ros-core's genpy) provide; probed by ``ros_available``."""
GENERATED = {"rosbridge_msgs": "msg", "rosauth": "srv"}
"""Interface packages with no Debian package: generated from the suite's files."""
STUB_PACKAGES = (
    "std_msgs",
    "std_srvs",
    "geometry_msgs",
    "sensor_msgs",
    "trajectory_msgs",
    "rosgraph_msgs",
    "rosbridge_msgs",
    "rosauth",
    "rosbridge_library",
    "rosbridge_server",
)
"""Always stubbed for rospack; message packages found in Debian's dist-packages are added."""

_PACKAGE_XML = """<?xml version="1.0"?>
<package format="2">
  <name>{name}</name>
  <version>0.0.0</version>
  <description>Stub manifest so that rospack finds {name} (embodied ROS tests).</description>
  <maintainer email="tests@embodied.example.org">embodied tests</maintainer>
  <license>BSD</license>
</package>
"""


def suite_dir() -> Path:
    """The rosbridge_suite source folder (``$EMBODIED_ROSBRIDGE_SUITE`` or ``../shared``)."""
    return Path(os.environ.get(SUITE_VAR) or ROOT.parent / "shared" / "rosbridge_suite")


def missing() -> str | None:
    """None if the suite's sources and genpy are where :func:`prepare` needs them, else why."""
    suite = suite_dir()
    script = suite / "rosbridge_server" / "scripts" / "rosbridge_websocket.py"
    if not script.is_file():
        return f"{script} not found (set {SUITE_VAR} to the rosbridge_suite folder)"
    for tool in ("genmsg_py.py", "gensrv_py.py"):
        if not (GENPY_DIR / tool).is_file():
            return f"{GENPY_DIR / tool} not found (fix: apt-get install -y python3-genpy)"
    return None


@dataclasses.dataclass(frozen=True)
class RosbridgeSetup:
    """A prepared scratch folder: the command line and environment of the server."""

    python: str
    script: Path
    pythonpath: tuple[Path, ...]
    package_path: Path

    def argv(self, port: int, address: str = "127.0.0.1") -> list[str]:
        """``rosbridge_websocket.py`` on ``address:port`` (private ROS params)."""
        return [self.python, str(self.script), f"_port:={port}", f"_address:={address}"]

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with PYTHONPATH and ROS_PACKAGE_PATH set for the server."""
        env = dict(base)
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in self.pythonpath)
        package_path = [str(self.package_path)]
        if base.get("ROS_PACKAGE_PATH"):
            package_path.append(base["ROS_PACKAGE_PATH"])
        env["ROS_PACKAGE_PATH"] = os.pathsep.join(package_path)
        return env


def _message_packages() -> list[str]:
    names = set(STUB_PACKAGES)
    if DIST_PACKAGES.is_dir():
        for d in DIST_PACKAGES.iterdir():
            if (d / "msg" / "__init__.py").is_file() or (d / "srv" / "__init__.py").is_file():
                names.add(d.name)
    return sorted(names)


def _genpy(python: str, tool: str, args: list[str]) -> None:
    proc = subprocess.run(
        [python, str(GENPY_DIR / tool), *args], capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        raise ConfigError(f"genpy {tool} {' '.join(args)} failed:\n{proc.stderr[-2000:]}")


def prepare(workdir: str | os.PathLike[str], python: str = "/usr/bin/python3") -> RosbridgeSetup:
    """Generate the server's scratch folder under ``workdir`` (idempotent)."""
    why = missing()
    if why is not None:
        raise ConfigError(f"cannot start rosbridge_server: {why}")
    suite = suite_dir()
    root = Path(workdir)
    gen = root / "python"
    stubs = root / "packages"
    for pkg, kind in GENERATED.items():
        src = suite / pkg / kind
        out = gen / pkg / kind
        if (out / "__init__.py").is_file():
            continue
        files = sorted(str(p) for p in src.glob(f"*.{kind}"))
        if not files:
            raise ConfigError(f"no .{kind} files in {src}")
        out.mkdir(parents=True, exist_ok=True)
        (gen / pkg / "__init__.py").write_text("")
        tool = "genmsg_py.py" if kind == "msg" else "gensrv_py.py"
        includes = [f"-I{pkg}:{suite / pkg / 'msg'}"]  # builtin field types only
        _genpy(python, tool, ["-p", pkg, "-o", str(out), *includes, *files])
        _genpy(python, tool, ["--initpy", "-p", pkg, "-o", str(out)])
    for name in _message_packages():
        manifest = stubs / name / "package.xml"
        if not manifest.is_file():
            manifest.parent.mkdir(parents=True, exist_ok=True)
            manifest.write_text(_PACKAGE_XML.format(name=name))
    return RosbridgeSetup(
        python=python,
        script=suite / "rosbridge_server" / "scripts" / "rosbridge_websocket.py",
        pythonpath=(
            gen,
            suite / "rosbridge_library" / "src",
            suite / "rosbridge_server" / "src",
        ),
        package_path=stubs,
    )


def websocket_accepts(port: int, host: str = "127.0.0.1", timeout_s: float = 1.0) -> bool:
    """True if a websocket opening handshake on ``host:port`` is answered with 101."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout_s) as s:
        s.settimeout(timeout_s)
        s.sendall(request.encode())
        reply = b""
        while b"\r\n" not in reply:
            chunk = s.recv(1024)
            if not chunk:
                break
            reply += chunk
        if reply.split(b" ", 2)[1:2] == [b"101"]:
            with contextlib.suppress(OSError):  # a clean close frame (code 1000, masked)
                s.sendall(b"\x88\x82\x00\x00\x00\x00\x03\xe8")
            return True
    return False


def wait_websocket(
    port: int, proc: subprocess.Popen[Any], timeout_s: float, what: str = "rosbridge_server"
) -> None:
    """Return once ``proc`` accepts websocket handshakes on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ConfigError(f"{what} exited with code {proc.returncode} during start-up")
        if websocket_accepts(port, timeout_s=0.5):
            return
        time.sleep(0.05)
    raise ConfigError(f"{what} did not accept websockets on 127.0.0.1:{port} within {timeout_s} s")
