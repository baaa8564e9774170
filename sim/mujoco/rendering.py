"""Headless offscreen rendering with ``mujoco.Renderer`` and a clear error when GL is missing."""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import weakref
from typing import Any

import mujoco
import numpy as np

from embodied.errors import RenderError

GL_FIX = (
    "render headless with MUJOCO_GL=egl (apt-get install -y libegl1 libegl-mesa0 "
    "libgl1-mesa-dri) or MUJOCO_GL=osmesa (apt-get install -y libosmesa6), set before "
    "Python starts; or build the env with camera=False"
)


def project_points(
    model: mujoco.MjModel,
    data: mujoco.MjData,
    camera: str,
    points: np.ndarray,
    height: int,
    width: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Pixel coordinates of world points in ``camera``'s rendered image (pinhole, MuJoCo's fovy).

    ``data`` must hold the camera pose (after ``mj_kinematics``/``mj_forward``).

    Args:
        model: The MuJoCo model.
        data: Its data.
        camera: Camera name.
        points: (N, 3) world points in m.
        height: Rendered image height (px).
        width: Rendered image width (px).

    Returns:
        ``uv`` (N, 2): column and row in px, continuous, (0, 0) the top-left corner of the
        top-left pixel (so pixel ``(i, j)`` spans ``[j, j + 1) x [i, i + 1)``), and ``depth``
        (N,) in m along the view axis (<= 0: behind the camera, ``uv`` meaningless).
    """
    cid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
    if cid < 0:
        raise RenderError(f"no camera named {camera!r} in the model")
    rot = data.cam_xmat[cid].reshape(3, 3)
    local = (np.asarray(points, dtype=np.float64).reshape(-1, 3) - data.cam_xpos[cid]) @ rot
    depth = -local[:, 2]  # MuJoCo cameras look along their -z axis, +y up
    focal = 0.5 * height / np.tan(np.deg2rad(model.cam_fovy[cid]) / 2.0)
    safe = np.where(depth > 1e-9, depth, np.inf)
    uv = np.stack(
        [width / 2 + focal * local[:, 0] / safe, height / 2 - focal * local[:, 1] / safe], 1
    )
    return uv, depth


class CameraRenderer:
    """Renders named cameras of one model into uint8 (H, W, 3) arrays.

    The GL context is created on first use, so envs without cameras never touch GL; each
    thread that renders gets its own context (an EGL context is current in one thread only),
    so an env may be stepped from a worker thread (tuning server, RL training). Contexts
    are released by :meth:`close`, or at interpreter exit (before GL libraries unload).

    Args:
        model: The compiled model.
        height: Image height in pixels.
        width: Image width in pixels.
    """

    def __init__(self, model: mujoco.MjModel, height: int, width: int) -> None:
        self.model = model
        self.height = int(height)
        self.width = int(width)
        self._holder: dict[int, Any] = {}  # thread id -> renderer (GL contexts are per thread)
        self._cam_ids: dict[str, int] = {}
        self._finalizer = weakref.finalize(self, _close_holder, self._holder)

    def _renderer(self) -> mujoco.Renderer:
        thread = threading.get_ident()
        renderer = self._holder.get(thread)
        if renderer is None:
            backend = os.environ.get("MUJOCO_GL", "(unset)")
            try:
                renderer = mujoco.Renderer(self.model, self.height, self.width)
            except Exception as exc:
                raise RenderError(
                    f"cannot create an offscreen GL context (MUJOCO_GL={backend}): "
                    f"{type(exc).__name__}: {exc}",
                    fix=GL_FIX,
                ) from exc
            self._holder[thread] = renderer
            _LIVE.add(self)
            _register_exit_hook()
        return renderer

    def camera_id(self, camera: str) -> int:
        """Model id of ``camera``."""
        cid = self._cam_ids.get(camera)
        if cid is None:
            cid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
            if cid < 0:
                names = [self.model.camera(i).name for i in range(self.model.ncam)]
                raise RenderError(
                    f"model has no camera {camera!r}; cameras: {names}",
                    fix="pick one of the model's cameras",
                )
            self._cam_ids[camera] = cid
        return cid

    def render(self, data: mujoco.MjData, camera: str) -> np.ndarray:
        """Render ``camera`` for the current ``data`` (kinematics must be up to date)."""
        renderer = self._renderer()
        renderer.update_scene(data, camera=self.camera_id(camera))
        return renderer.render()

    def close(self) -> None:
        """Release the GL context."""
        self._finalizer()


_LIVE: weakref.WeakSet[CameraRenderer] = weakref.WeakSet()
_HOOK: list[bool] = []


def _register_exit_hook() -> None:
    """Close live GL contexts at exit, before ``mujoco.egl`` terminates the EGL display.

    atexit runs hooks last-in first-out; registering after the first context exists puts
    this hook ahead of the GL backend's own teardown.
    """
    if not _HOOK:
        _HOOK.append(True)
        atexit.register(_close_all)


def _close_all() -> None:
    for r in list(_LIVE):
        r.close()


def _close_holder(holder: dict[int, Any]) -> None:
    while holder:
        _, renderer = holder.popitem()
        with contextlib.suppress(Exception):
            renderer.close()
