"""The PDP experiment's statistics and tables: mean ± std over training seeds, Wilson intervals
on the pooled episodes, both policy variants in one table."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from embodied.apps.evaluation.stats import wilson_interval
from embodied.apps.lab.pdp import (
    ROUTES,
    SHIFT_DIAGNOSTICS,
    SHIFT_METHODS,
    UNSHIFTED_METHODS,
    aggregate,
    coverage_of,
    results_markdown,
)
from embodied.apps.lab.stats import format_pooled, pooled_stat

CELL = re.compile(r"\d+ ± \d+ \[\d+–\d+\] \(\d+\)")


def _cell(successes: int, n: int, route: str = "center") -> dict[str, Any]:
    outcomes = [1] * successes + [0] * (n - successes)
    return {
        "success": successes / n,
        "successes": successes,
        "n": n,
        "outcomes": outcomes,
        "seeds": list(range(n)),
        "routes": {route: successes} if successes else {},
    }


def _run(mode: str, seed: int, k: int) -> dict[str, Any]:
    """A synthetic :func:`evaluate` result with 10 episodes per cell, ``k`` of them successes
    (shifted: ``k`` per scene and method)."""
    unshifted = {m: _cell(k, 10) for m in UNSHIFTED_METHODS}
    unshifted.update({f"pdp_route_{r}": _cell(k, 10, r) for r in ROUTES})
    scene = {m: _cell(k, 10) for m in (*SHIFT_METHODS, *SHIFT_DIAGNOSTICS)}
    budget = {"gradient_steps": 300, "search_rollouts": {"pdp_search": 48, "dp_best_of_n": 48}}
    return {
        "mode": mode,
        "train_seed": seed,
        "unshifted": unshifted,
        "route_control": {r: {"matches": k, "n": 10, "route_match": k / 10} for r in ROUTES},
        "coverage": {
            "demonstrations": coverage_of({"left": 3, "center": 4, "right": 3}),
            "pdp_prior": coverage_of({"center": k}),
            "dp": coverage_of({"center": k, "left": 1}),
        },
        "interpolation": {
            "ends": ["left", "right"],
            "points": [{"alpha": a, **_cell(k, 10)} for a in (0.0, 0.5, 1.0)],
        },
        "shifted": {"block_left": {**scene, "budget": budget}, "block_right": {**scene}},
        "seconds": 1.0,
    }


def test_pooled_stat_is_mean_std_over_seeds_and_wilson_on_pooled_episodes() -> None:
    stat = pooled_stat([(6, 10), (8, 10), (10, 10)])
    assert stat["mean"] == pytest.approx(0.8)
    assert stat["std"] == pytest.approx(np.std([0.6, 0.8, 1.0], ddof=1))
    assert (stat["successes"], stat["n"], stat["seeds"]) == (24, 30, 3)
    assert stat["wilson"] == pytest.approx(list(wilson_interval(24, 30)))
    assert format_pooled(stat) == "80 ± 20 [63–90] (30)"
    assert pooled_stat([(3, 10)])["std"] == 0.0


def test_aggregate_pools_scenes_and_groups_by_mode() -> None:
    runs = [_run("reference", s, k) for s, k in ((0, 2), (1, 4))]
    runs += [_run("receding", s, k) for s, k in ((0, 7), (1, 9), (2, 8))]
    agg = aggregate(runs)
    assert set(agg) == {"reference", "receding"}
    assert agg["receding"]["seeds"] == [0, 1, 2]
    allr = agg["reference"]["shifted"]["all"]["pdp_adapt"]
    assert (allr["successes"], allr["n"]) == (2 * 2 + 2 * 4, 40)  # 2 scenes x 2 seeds
    assert allr["mean"] == pytest.approx(0.3)
    assert agg["receding"]["unshifted"]["pdp_route_left"]["mean"] == pytest.approx(0.8)
    assert agg["reference"]["coverage"]["demonstrations"]["route_counts"] == {
        "left": 6,
        "center": 8,
        "right": 6,
    }
    assert agg["reference"]["budget"] == {"search_rollouts_per_scene": 48, "gradient_steps": 300}
    assert set(agg["reference"]["shifted"]) == {"block_left", "block_right", "all"}
    assert [p["alpha"] for p in agg["receding"]["interpolation"]["points"]] == [0.0, 0.5, 1.0]


def test_results_markdown_has_both_variants_and_every_method() -> None:
    runs = [_run("reference", 0, 3), _run("receding", 0, 6), _run("receding", 1, 8)]
    md = results_markdown(runs)
    header = "| method | reference | receding |"
    assert md.count(header) == 2  # the unshifted and the shifted table
    unshifted, shifted = md.split("## Shifted scenes (all scenes pooled)")[:2]
    for label in UNSHIFTED_METHODS.values():
        assert f"| {label} |" in unshifted
    for route in ROUTES:
        assert f"| PDP, z = {route} route latent |" in unshifted
    for label in (*SHIFT_METHODS.values(), *SHIFT_DIAGNOSTICS.values()):
        assert f"| {label} |" in shifted
    assert "[ablation]" in SHIFT_METHODS["pdp_adapt_zero"]
    assert "[extension]" in SHIFT_METHODS["pdp_search"]
    row = next(line for line in shifted.splitlines() if line.startswith("| DP best-of-N"))
    cells = row.strip("|").split("|")[1:]
    assert len(cells) == 2 and all(CELL.fullmatch(c.strip()) for c in cells), row
    assert "70 ± 14 [55–82] (40)" in row  # receding: 6/10 and 8/10 per scene, 2x2 cells
    assert "48 search rollouts per scene" in md
    assert "## Interpolation reference" in md and "## Interpolation receding" in md
    assert "## Mode coverage" in md and "training demonstrations" in md
