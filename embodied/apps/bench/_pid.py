"""Controller micro-benchmarks (used by ``embodied bench steer``)."""

from __future__ import annotations

import math
import statistics
import time

from controllers.pid import PIDController


def pid_update_us(n: int = 20000, repeats: int = 7) -> float:
    """Median time of one ``PIDController.update`` in microseconds.

    A full-featured PID (filtered derivative, back-calculation anti-windup, output and rate
    limits) tracks a noisy sinusoidal measurement; each of ``repeats`` batches times ``n``
    updates and the median per-update time over the batches is returned.

    Args:
        n: Updates per timed batch.
        repeats: Number of batches.
    """
    pid = PIDController(
        kp=0.8,
        ki=2.0,
        kd=0.02,
        tau_d=0.05,
        output_min=-1.0,
        output_max=1.0,
        rate_limit=5.0,
        anti_windup="back_calculation",
    )
    meas = [0.1 + 0.05 * math.sin(0.01 * k) + 0.003 * ((k * 7919) % 13 - 6) for k in range(n)]
    dt, sp = 0.05, 0.12
    update = pid.update
    per_batch: list[float] = []
    for _ in range(repeats):
        pid.reset()
        t0 = time.perf_counter()
        for y in meas:
            update(y, sp, dt)
        per_batch.append((time.perf_counter() - t0) / n * 1e6)
    return float(statistics.median(per_batch))


def run(quick: bool = False) -> dict[str, float]:
    """Controller benchmark figures: ``pid_update_us`` (median, target < 50)."""
    return {"pid_update_us": pid_update_us(n=2000 if quick else 20000)}


if __name__ == "__main__":  # pragma: no cover
    print(run())
