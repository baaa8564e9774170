"""The evaluation harness: success rates with Wilson intervals over an explicit episode grid.

Python::

    from embodied.apps.evaluation import EvalConfig, PolicyLoader, evaluate

    cfg = EvalConfig(envs="libero:libero_spatial", episodes=50, workers=4, out="reports/eval")
    result = evaluate(cfg, PolicyLoader("checkpoints/my_policy"))
    print(result.markdown())

CLI: ``embodied eval --env libero:libero_spatial --policy P --episodes 50 --workers 4 --out DIR``.

The grid (task x seed/init state x variant) is built by :func:`build_grid`; each
:class:`EpisodeSpec` runs through :func:`embodied.loop.rollout` on a backend from
:data:`BACKENDS` (``local`` worker processes with rerun-on-death, ``inline``).
"""

from embodied.apps.evaluation.backends import BACKENDS, EvaluationError, InlineBackend, LocalBackend
from embodied.apps.evaluation.configuration_evaluation import (
    EpisodeSpec,
    EvalConfig,
    EvalVariant,
    PolicyFactory,
    PolicyLoader,
)
from embodied.apps.evaluation.grid import build_grid
from embodied.apps.evaluation.harness import evaluate, summarize
from embodied.apps.evaluation.report import EvalResult, library_versions
from embodied.apps.evaluation.stats import GroupStats, TaskStats, wilson_interval
from embodied.apps.evaluation.worker import EpisodeRecord, EpisodeRunner

__all__ = [
    "BACKENDS",
    "EpisodeRecord",
    "EpisodeRunner",
    "EpisodeSpec",
    "EvalConfig",
    "EvalResult",
    "EvalVariant",
    "EvaluationError",
    "GroupStats",
    "InlineBackend",
    "LocalBackend",
    "PolicyFactory",
    "PolicyLoader",
    "TaskStats",
    "build_grid",
    "evaluate",
    "library_versions",
    "summarize",
    "wilson_interval",
]
