"""Cross-check with Storm: the product interval MDP checked by stormpy 2.0.

stormpy 2.0 builds interval MDPs from a sparse matrix of ``stormpy.Interval`` entries (one
row group per product state, one row per action) and checks them with
``stormpy.model_checking(..., uncertainty_resolution_mode=ROBUST)``: nature resolves the
intervals against the objective, as in :func:`controllers.shield.robust.robust_safety`.

* bounded: ``1 - Pmin=? [F<=H "bad"]`` (Storm's property language has no bounded ``G``;
  minimising the probability of reaching "bad" within H steps is the same objective);
* unbounded: ``Pmax=? [G !"bad"]``. Storm computes it only for graph-preserving interval
  models (every interval's lower bound > 0 where the upper is > 0), which PAC intervals of
  unseen successors are not; use a horizon for those.

stormpy is an optional dependency (``pip install -e '.[shield]'``), imported on use.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from controllers.shield.automaton import Product
from controllers.shield.pac import IntervalModel
from embodied.errors import ConfigError

STORM_FIX = "install the shield extra: pip install -e '.[shield]' (stormpy 2.0)"
BAD_LABEL = "bad"


def _stormpy() -> Any:
    try:
        import stormpy
    except ImportError as exc:
        raise ConfigError(f"stormpy is not installed ({exc})", fix=STORM_FIX) from exc
    return stormpy


def build_interval_mdp(product: Product, model: IntervalModel) -> Any:
    """The product interval MDP as a ``stormpy`` sparse MDP with Interval values.

    Product state ``(s, q)`` is Storm state ``product.index(s, q)``; non-violating states have
    one choice per action, with an interval entry ``[lower, upper](s, a, s')`` towards
    ``(s', delta(q, L(s')))`` for every successor whose upper bound is positive; violating
    states have one self-loop ``[1, 1]`` and the label ``"bad"``.
    """
    stormpy = _stormpy()
    from stormpy.developer import storage
    from stormpy.models import SparseMdp, SparseModelComponents, StateLabeling

    interval = stormpy.Interval
    n_s, n_a, _ = model.lower.shape
    if n_s != product.n_states:
        raise ConfigError(f"interval model has {n_s} states, product has {product.n_states}")
    builder = storage.SparseMatrixBuilder[interval](
        rows=0,
        columns=0,
        entries=0,
        force_dimensions=False,
        has_custom_row_grouping=True,
        row_groups=0,
    )
    labeling = StateLabeling(product.size)
    labeling.add_label(BAD_LABEL)
    row = 0
    for s in range(n_s):
        for q in range(product.n_dfa):
            me = product.index(s, q)
            builder.new_row_group(row)
            if product.bad_q[q]:
                labeling.add_label_to_state(BAD_LABEL, me)
                builder.add_next_value(row, me, interval(1.0, 1.0))
                row += 1
                continue
            for a in range(n_a):
                # columns must come in increasing order within a row
                targets = sorted(
                    (product.index(*product.successor(q, int(s2))), int(s2))
                    for s2 in np.flatnonzero(model.upper[s, a] > 0.0)
                )
                for column, s2 in targets:
                    lo, hi = float(model.lower[s, a, s2]), float(model.upper[s, a, s2])
                    builder.add_next_value(row, column, interval(lo, hi))
                row += 1
    components = SparseModelComponents(
        transition_matrix=builder.build(), state_labeling=labeling, reward_models={}
    )
    return SparseMdp(components)


def storm_safety(
    product: Product, model: IntervalModel, horizon: int | None, *, precision: float = 1e-12
) -> np.ndarray:
    """Storm's worst-case maximal safety probability per product state, shape (S, Q).

    Args:
        product: The abstract MDP x DFA product.
        model: Interval ambiguity set (e.g. ``TransitionCounts.intervals(delta)``).
        horizon: ``H`` steps, or None for unbounded ``G !bad``.
        precision: Absolute precision of Storm's robust value iteration (unbounded case).

    Raises:
        ConfigError: stormpy missing, or Storm refused the model (the message says why).
    """
    stormpy = _stormpy()
    mdp = build_interval_mdp(product, model)
    env = stormpy.environments.sound()
    solver = env.solver().min_max()
    solver.precision = stormpy.Rational(repr(float(precision)))
    solver.relative_termination_criterion = False
    if horizon is None:
        formula, complement = f'Pmax=? [G !"{BAD_LABEL}"]', False
    else:
        formula, complement = f'Pmin=? [F<={int(horizon)} "{BAD_LABEL}"]', True
    prop = stormpy.parse_properties(formula)[0]
    try:
        result = stormpy.model_checking(
            mdp,
            prop,
            uncertainty_resolution_mode=stormpy.UncertaintyResolutionMode.ROBUST,
            environment=env,
        )
    except RuntimeError as exc:
        raise ConfigError(
            f"Storm could not check {formula} on the interval MDP: {exc}",
            fix="give a horizon (unbounded checks need lower bounds > 0 on every transition)",
        ) from exc
    values = np.array([result.get_value(i) for i in range(product.size)], dtype=np.float64)
    values = values.reshape(product.n_states, product.n_dfa)
    return 1.0 - values if complement else values
