"""The safety filter between policy and robot (an :class:`embodied.contracts.ActionFilter`).

Rules, applied in this order to each joint-position target (rad):

1. **e-stop latch** - while latched every call raises :class:`SafetyFault`; only
   :meth:`SafetyFilter.clear_estop` clears it (``reset()`` at episode start does not).
2. **non-finite** - NaN/inf in the action or the measured state: refused (fault).
3. **stale state** - measured state older than ``safety.stale_state_ms`` while the transport is
   connected: refused (fault). A closed transport is the robot env's business (it holds and
   waits for the reconnect, up to ``ros.reconnect_grace_s``).
4. **joint position limits** - clipped into ``[lower_rad, upper_rad]``.
5. **max step** - target clipped to within ``safety.max_step_rad`` of the measured position.
6. **velocity** - target clipped so that reaching it in one control period needs at most
   ``max_velocity_rad_s * velocity_margin``.
7. **workspace box** - if the end effector at the target leaves the box, the step is shortened
   (bisection along the joint-space line) to the last point inside; from outside the box only
   steps that bring the end effector closer are allowed, else the robot holds.

A fault latches the e-stop (``latch_faults``). Every clip and refusal is logged on the
``hardware.safety`` logger and kept in :attr:`SafetyFilter.events` with before/after values.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from embodied.errors import ConfigError, SafetyFault
from embodied.specs import Observation
from hardware.configuration_robot import RobotConfig

log = logging.getLogger("hardware.safety")


@dataclass(frozen=True)
class SafetyEvent:
    """One clip or refusal.

    Attributes:
        step: Filter call index within the episode.
        rule: ``joint_limits``, ``max_step``, ``velocity``, ``workspace``, ``non_finite``,
            ``stale_state`` or ``estop``.
        before: Target before this rule (rad).
        after: Target after this rule (rad); None when refused.
        message: Human-readable detail.
    """

    step: int
    rule: str
    before: list[float]
    after: list[float] | None
    message: str

    def to_dict(self) -> dict[str, object]:
        """JSON-serialisable form."""
        return {
            "step": self.step,
            "rule": self.rule,
            "before": self.before,
            "after": self.after,
            "message": self.message,
        }


def _box_distance(p: np.ndarray, low: np.ndarray, high: np.ndarray) -> float:
    """Euclidean distance (m) from ``p`` to the box (0 inside)."""
    return float(np.linalg.norm(np.maximum(low - p, 0) + np.maximum(p - high, 0)))


class SafetyFilter:
    """Limits, watchdog and e-stop for joint-position targets.

    Args:
        config: The robot config (joint limits, ``safety`` rules, control rate).
        fk: Forward kinematics ``q_rad -> ee_m`` (3,), required by a workspace box.
        state_age_s: Returns the age (s) of the freshest measured state, or None when the
            transport is disconnected (then the watchdog defers to the robot env).
            None disables the watchdog (offline use).
        control_rate_hz: Control rate (Hz) the velocity rule assumes; default from config.
        on_estop: Called once when the e-stop latches (e.g. ``robot.estop``).
        latch_faults: Latch the e-stop on every fault (stale state, non-finite values).
        max_events: Events kept in memory (oldest dropped).
    """

    def __init__(
        self,
        config: RobotConfig,
        fk: Callable[[np.ndarray], np.ndarray] | None = None,
        state_age_s: Callable[[], float | None] | None = None,
        control_rate_hz: float | None = None,
        on_estop: Callable[[], None] | None = None,
        latch_faults: bool = True,
        max_events: int = 10_000,
    ) -> None:
        self.config = config
        self.rules = config.safety
        n = len(config.joints)
        self.n = n
        self.lower = np.array([j.lower_rad for j in config.joints])
        self.upper = np.array([j.upper_rad for j in config.joints])
        self.vmax = np.array([j.max_velocity_rad_s for j in config.joints]) * (
            self.rules.velocity_margin
        )
        self.dt = 1.0 / float(control_rate_hz or config.control_rate_hz)
        self.fk = fk
        if self.rules.workspace is not None and fk is None:
            raise ConfigError("a workspace box needs an fk function", fix="pass fk=robot.fk")
        ws = self.rules.workspace
        self.ws_low = None if ws is None else np.asarray(ws.low_m, dtype=np.float64)
        self.ws_high = None if ws is None else np.asarray(ws.high_m, dtype=np.float64)
        self.state_age_s = state_age_s
        self.on_estop = on_estop
        self.latch_faults = latch_faults
        self.events: deque[SafetyEvent] = deque(maxlen=max_events)
        self.counts: Counter[str] = Counter()
        self.estop_reason: str | None = None
        self.step = 0

    # ----------------------------------------------------------------- e-stop
    @property
    def estopped(self) -> bool:
        """Whether the e-stop is latched."""
        return self.estop_reason is not None

    def estop(self, reason: str = "e-stop requested") -> None:
        """Latch the e-stop: every later call raises until :meth:`clear_estop`."""
        if self.estop_reason is None:
            self.estop_reason = reason
            log.error("e-stop latched: %s", reason)
            if self.on_estop is not None:
                try:
                    self.on_estop()
                except Exception as exc:
                    log.error("on_estop callback failed: %s", exc)

    def clear_estop(self) -> None:
        """Clear a latched e-stop (an explicit operator action)."""
        if self.estop_reason is not None:
            log.warning("e-stop cleared (was: %s)", self.estop_reason)
        self.estop_reason = None

    # ------------------------------------------------------------ the filter
    def reset(self) -> None:
        """Start a new episode: step counter to 0. Does NOT clear a latched e-stop."""
        self.step = 0

    def _record(self, rule: str, before: np.ndarray, after: np.ndarray | None, msg: str) -> None:
        event = SafetyEvent(
            self.step,
            rule,
            [float(x) for x in before],
            None if after is None else [float(x) for x in after],
            msg,
        )
        self.events.append(event)
        self.counts[rule] += 1
        if after is None:
            log.error("step %d %s REFUSED %s: before=%s", self.step, rule, msg, event.before)
        else:
            log.warning(
                "step %d %s clipped %s: before=%s after=%s",
                self.step,
                rule,
                msg,
                np.round(before, 5).tolist(),
                np.round(after, 5).tolist(),
            )

    def _fault(self, rule: str, action: np.ndarray, msg: str, fix: str) -> SafetyFault:
        self._record(rule, action, None, msg)
        if self.latch_faults:
            self.estop(f"{rule}: {msg}")
        return SafetyFault(msg, fix=fix)

    def __call__(self, action: np.ndarray, obs: Observation) -> np.ndarray:
        """Return the target that may be sent, or raise :class:`SafetyFault` to stop."""
        try:
            return self._filter(np.asarray(action, dtype=np.float64), obs)
        finally:
            self.step += 1

    def _filter(self, action: np.ndarray, obs: Observation) -> np.ndarray:
        if self.estop_reason is not None:
            self._record("estop", action, None, self.estop_reason)
            raise SafetyFault(
                f"e-stop is latched ({self.estop_reason}); command refused",
                fix="find the cause, then call SafetyFilter.clear_estop()",
            )
        if action.shape != (self.n,):
            raise self._fault(
                "non_finite",
                action.ravel(),
                f"action shape {action.shape} is not ({self.n},)",
                "send one target per joint",
            )
        if not np.isfinite(action).all():
            bad = [self.config.joints[i].name for i in np.flatnonzero(~np.isfinite(action))]
            raise self._fault(
                "non_finite",
                action,
                f"non-finite target for joints {bad}",
                "check the policy output (NaN/inf)",
            )
        q = np.asarray(obs["state"], dtype=np.float64)[: self.n]
        if not np.isfinite(q).all():
            raise self._fault(
                "non_finite",
                action,
                f"non-finite measured state {q.tolist()}",
                "check the robot's joint state stream",
            )
        if self.state_age_s is not None:
            age = self.state_age_s()
            limit_s = self.rules.stale_state_ms / 1e3
            if age is not None and age > limit_s:
                raise self._fault(
                    "stale_state",
                    action,
                    f"state is {age * 1e3:.0f} ms old (limit {self.rules.stale_state_ms:.0f} ms)",
                    "check that the robot driver is alive and publishing joint states",
                )
        target = action.copy()
        clipped = np.clip(target, self.lower, self.upper)
        if not np.array_equal(clipped, target):
            self._record("joint_limits", target, clipped, "target outside joint limits")
            target = clipped
        step = self.rules.max_step_rad
        clipped = np.clip(target, q - step, q + step)
        if not np.array_equal(clipped, target):
            self._record("max_step", target, clipped, f"step larger than {step} rad")
            target = clipped
        vstep = self.vmax * self.dt
        clipped = np.clip(target, q - vstep, q + vstep)
        if not np.array_equal(clipped, target):
            self._record(
                "velocity",
                target,
                clipped,
                f"implied velocity above {np.round(self.vmax, 3).tolist()} rad/s",
            )
            target = clipped
        if self.fk is not None and self.ws_low is not None and self.ws_high is not None:
            target = self._workspace(q, target)
        return target

    def _workspace(self, q: np.ndarray, target: np.ndarray) -> np.ndarray:
        assert self.fk is not None and self.ws_low is not None and self.ws_high is not None
        lo, hi = self.ws_low, self.ws_high

        def dist(x: np.ndarray) -> float:
            assert self.fk is not None
            return _box_distance(self.fk(x), lo, hi)

        if dist(target) == 0.0:
            return target
        d_now = dist(q)
        if d_now > 0.0:
            if dist(target) < d_now:
                return target  # moving back towards the box is allowed
            hold = np.clip(q, self.lower, self.upper)
            self._record("workspace", target, hold, "end effector outside the box; holding")
            return hold
        s_in, s_out = 0.0, 1.0  # bisection on the fraction of the step
        for _ in range(12):
            mid = 0.5 * (s_in + s_out)
            if dist(q + mid * (target - q)) == 0.0:
                s_in = mid
            else:
                s_out = mid
        shortened = np.clip(q + s_in * (target - q), self.lower, self.upper)
        self._record(
            "workspace",
            target,
            shortened,
            f"end effector would leave the box; step scaled by {s_in:.3f}",
        )
        return shortened

    def summary(self) -> dict[str, object]:
        """Counts per rule and the latched e-stop reason (for reports)."""
        return {"counts": dict(self.counts), "estop": self.estop_reason, "steps": self.step}
