"""Configuration of ``embodied tune``: the task to run and the server that shows it."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from embodied.config import Rule, checked, validate
from embodied.recording import check_record_path

LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost", "ip6-loopback"})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""Host names (Host header, port and brackets removed) the page always answers to."""
HOST_NAME = re.compile(
    r"^(?=.{1,253}$)[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*$"
)
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""File names the page may save/load gains under (no paths, no hidden files)."""


def normalise_host(name: str) -> str:
    """``name`` as the Host allow-list compares it: lower case, no brackets, no trailing dot."""
    name = name.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    return name[:-1] if name.endswith(".") else name


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an IP address) only accepts connections from this machine."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ServerConfig:
    """Where the tuning page is served and who may use it.

    Args:
        host: Interface to bind; ``127.0.0.1`` (default) serves this machine only.
        port: TCP port (0 picks a free one).
        token: Shared secret required on every HTTP request and WebSocket (``?token=`` or
            ``Authorization: Bearer``). Mandatory when ``host`` is not a loopback address.
        telemetry_hz: Rate at which telemetry batches are pushed to the page (>= 10 Hz).
        frame_hz: Rate at which camera frames are pushed (JPEG, base64).
        allowed_hosts: Extra names (DNS names or IP addresses, no port) the page may be
            reached under. Every HTTP request and WebSocket must carry a ``Host`` header
            naming ``127.0.0.1``, ``localhost``, ``[::1]``, the bound ``host`` or one of these
            (any port): a page on another site whose name an attacker re-points at this
            machine (DNS rebinding) names its own site there and is refused.
        head_timeout_s: Longest time a client may take to send a request's head (s); a
            slower one (slowloris) gets 408 and is closed.
        max_connections: Connections served at once; more are answered 503 (each open
            connection holds a socket and buffers).
    """

    config_name: ClassVar[str] = "tune server"

    host: str = "127.0.0.1"
    port: int = checked(8765, ge=0, le=65535, fix="use a valid TCP port")
    token: str | None = None
    telemetry_hz: float = checked(
        20.0, ge=10, le=100, fix="the page needs at least 10 updates per second"
    )
    frame_hz: float = checked(5.0, ge=0.5, le=30, fix="use e.g. 5 frames per second")
    allowed_hosts: tuple[str, ...] = ()
    head_timeout_s: float = checked(10.0, ge=0.1, le=300, fix="e.g. 10 (seconds)")
    max_connections: int = checked(100, ge=1, le=10_000, fix="e.g. 100")

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "token",
            lambda c: c.token is None or len(c.token) >= 8,
            lambda c: f"of {len(c.token)} characters is too short",
            "use at least 8 characters, e.g. "
            "`python -c 'import secrets; print(secrets.token_urlsafe())'`",
            show_value=False,
        ),
        Rule(
            "host",
            lambda c: is_loopback(c.host) or bool(c.token),
            "is refused without a token: anyone on the network could drive the robot",
            "pass --token SECRET (at least 8 characters) or bind --host 127.0.0.1",
        ),
        Rule(
            "allowed_hosts",
            lambda c: all(_is_host_name(n) for n in c.allowed_hosts),
            lambda c: (
                "has an allowed host "
                f"{next(n for n in c.allowed_hosts if not _is_host_name(n))!r} that is not a host "
                "name or IP address"
            ),
            "give a bare name or address without scheme or port, e.g. --allow-host robot-pc.local",
        ),
    )

    def __post_init__(self) -> None:
        self.allowed_hosts = tuple(self.allowed_hosts)
        validate(self)

    def host_allow_list(self) -> frozenset[str]:
        """Names (normalised, see :func:`normalise_host`) a request's Host header may carry."""
        names = {*LOOPBACK_HOSTS, *(normalise_host(n) for n in self.allowed_hosts)}
        names.add(normalise_host(self.host))  # the URL `embodied tune` prints names it
        return frozenset(names)


def _is_host_name(name: object) -> bool:
    """Whether an ``allowed_hosts`` entry is a bare DNS name or IP address."""
    if not isinstance(name, str):
        return False
    bare = normalise_host(name)
    try:
        ipaddress.ip_address(bare)
        return True
    except ValueError:
        return bool(HOST_NAME.match(bare))


@dataclass
class TuneConfig:
    """The steering task a person tunes.

    Args:
        env_id: Env to run (``mujoco:arm_reach`` is the built-in steering task).
        policy: Policy spec for ``policies.load`` (a Steerable policy).
        concept: Concept name from ``embodied.concepts`` (e.g. ``ee_speed``, m/s).
        knob: Policy knob the controller drives (``alpha``).
        setpoint: Initial setpoint of the concept (its units).
        controller: Initial controller type: ``off``, ``fixed``, ``pid`` or ``rl``.
        gains: Initial controller parameters (passed to ``controllers.make``), or a YAML file.
        seed: Seed of the first episode.
        pace: Run live episodes at the env's control rate (wall clock) so a person can watch.
        out_dir: Folder for saved gains YAML files and experiment results.
        hold: Steady-state hold mode of the built-in task: the arm patrols the cubes' hover
            points at cruise speed and every episode runs its full length (15 s) instead of
            ending at the target after ~2 s, so a transient is seen whole and step tests start
            from a settled signal. Off: episodes end when the arm reaches its target.
        seed_mode: Reset seed of each live episode: ``fixed`` (always ``seed``), ``sequence``
            (``seed``, ``seed + 1``, ...) or ``random``. Step tests and auto-tune always use
            ``seed``, so their candidates meet the same scene.
        step_from: Step experiment: setpoint before the step (the page's and the CLI's default).
        step_to: Step experiment: setpoint after the step.
        step_hold_s: Step experiment: least seconds at the initial setpoint before the step.
        settle_band: Step experiment: settling band as a fraction of the step size (2 %, the
            standard definition); the start counts as settled inside the same band.
        step_dwell_s: Step experiment: seconds the signal must stay in the band around the
            initial setpoint before the step is applied.
        step_timeout_s: Step experiment: apply the step at this time even if the start never
            settled (the result then says ``start_settled: false``).
        autotune_budget: Auto-tune: number of step experiments (episodes) it may run.
        max_overshoot_pct: Auto-tune: a candidate that overshoots more than this (%), or does
            not settle, is never preferred.
        autotune_method: ``search`` (coordinate search over kp and ki scored by IAE, among the
            candidates that settle within the overshoot limit) or ``simc`` (an open-loop bump
            test of the knob, a fitted first-order-plus-dead-time model and Skogestad's SIMC
            PI rule, with the loop's gain and phase margins, then verified by a step test).
        record: MCAP file recording every control step of every episode the page runs (live,
            step tests, auto-tune; :mod:`embodied.recording`; never overwritten).
        foxglove: Port of a live Foxglove view on 127.0.0.1 streaming the same channels
            (foxglove-sdk websocket server; 0 picks a free port; off when unset).
    """

    env_id: str = "mujoco:arm_reach"
    policy: str = "expert"
    concept: str = "ee_speed"
    knob: str = "alpha"
    setpoint: float = 0.15
    controller: str = checked(
        "pid", choices=("off", "fixed", "pid", "rl"), fix="pick --controller off|fixed|pid|rl"
    )
    gains: dict[str, float | str] | str | None = None
    seed: int = checked(0, ge=0, fix="use a seed >= 0")
    pace: bool = True
    out_dir: Path = field(default_factory=lambda: Path("tune-out"))
    hold: bool = True
    seed_mode: str = checked(
        "sequence", choices=("fixed", "sequence", "random"), fix="use --seed-mode sequence"
    )
    step_from: float = 0.08
    step_to: float = 0.15
    step_hold_s: float = checked(0.5, ge=0, fix="use e.g. 0.5 s")
    settle_band: float = checked(0.02, gt=0, lt=1, fix="use e.g. 0.05 for a 5% band")
    step_dwell_s: float = checked(0.5, ge=0, fix="e.g. step_dwell_s 0.5, step_timeout_s 5")
    step_timeout_s: float = 5.0
    autotune_budget: int = checked(9, ge=1, le=100, fix="use e.g. 9 step tests")
    max_overshoot_pct: float = checked(10.0, ge=0, lt=1000, fix="use e.g. 10 (percent of the step)")
    autotune_method: str = checked(
        "search", choices=("search", "simc"), fix="use --autotune-method search or simc"
    )
    record: str | None = None
    foxglove: int | None = checked(
        None, ge=0, le=65535, fix="e.g. --foxglove 8765 (Foxglove's default), or 0 for a free port"
    )

    config_name: ClassVar[str] = "tune"
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "step_timeout_s",
            lambda c: c.step_timeout_s >= max(c.step_hold_s, c.step_dwell_s),
            "must be >= step_hold_s={step_hold_s} and step_dwell_s={step_dwell_s}",
            "e.g. step_dwell_s 0.5, step_timeout_s 5",
        ),
    )

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        if self.record is not None:
            check_record_path(self.record)
        validate(self)
