"""A preloaded ``embodied`` process that forks one command run per request (issue 41).

The kill tests start each command dozens of times; a fresh interpreter importing torch and
MuJoCo costs about 2 s each time. This process imports the CLI and the modules the commands
load once, then forks a child per run, as multiprocessing's forkserver does with preloaded
modules. The child is the command as the user runs it in every way a kill can tell apart: its
own pid and process group (a SIGKILL of the group takes any worker with it), ``main()`` of
the ``embodied`` entry point with ``sys.argv`` set, stdout and stderr to a log file, exit
status from ``main``. It never runs anything before the fork that starts threads.

Protocol, one JSON object per line on stdin, answered on stdout:

* ``{"op": "run", "argv": [...], "cwd": DIR, "log": FILE}`` -> ``{"pid": PID}``
* ``{"op": "wait", "pid": PID}`` -> ``{"code": EXIT_STATUS}`` (``-9``: killed by SIGKILL)
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import traceback


def _child(req: dict) -> int:
    os.setpgid(0, 0)
    os.chdir(req["cwd"])
    fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.argv = ["embodied", *req["argv"]]
    from embodied.apps.cli import main

    try:
        main()
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException:  # a traceback: what the tests must never see
        traceback.print_exc()
        return 1
    return 0


def serve(preload: list[str]) -> None:
    for name in preload:
        importlib.import_module(name)
    out = sys.stdout
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "run":
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    code = _child(req)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            # as the child does: whichever runs first, the group exists before any kill
            with contextlib.suppress(PermissionError, ProcessLookupError):
                os.setpgid(pid, pid)
            reply = {"pid": pid}
        elif req["op"] == "wait":
            _, status = os.waitpid(req["pid"], 0)
            reply = {"code": os.waitstatus_to_exitcode(status)}
        else:
            reply = {"error": f"unknown op {req['op']!r}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    serve(sys.argv[1:])
