"""Shielding with robust MDPs learned with PAC guarantees and an LTL safety specification.

A shield sits between a policy and the env and blocks the actions whose worst-case
probability of violating the specification within ``H`` steps exceeds ``lambda``:

1. :mod:`~controllers.shield.abstraction` - binned measured quantities -> abstract states,
   atomic propositions (``bad``), a finite :class:`ActionSet`;
2. :mod:`~controllers.shield.pac` - counts ``N(s, a, s')`` and Weissman L1 confidence sets
   (union bound over pairs and, by default, over sample sizes: valid for counts gathered
   adaptively), with their interval relaxation;
3. :mod:`~controllers.shield.automaton` - the LTLf spec as a DFA (ltlf2dfa + MONA, or built
   in for ``G phi``) and the product with the abstract MDP;
4. :mod:`~controllers.shield.robust` - robust value iteration (nature minimises safety);
5. :mod:`~controllers.shield.storm` - the same interval MDP checked by Storm (stormpy 2.0);
6. :mod:`~controllers.shield.shield` - :class:`RobustShield`, the loop's
   :class:`ShieldFilter` and the gymnasium :class:`ShieldedEnv` (MaskablePPO masks).

Example::

    from controllers.shield import ActionSet, BinSpec, RobustShield, ShieldConfig, ShieldFilter

    config = ShieldConfig(bins=(BinSpec("x", (0.0, 1.0, 2.0), "m"),), horizon=10,
                          risk_bound=0.05, delta=0.05, spec="G !bad")
    shield = RobustShield.create(config, {"bad": lambda c: c.high["x"] <= 0.0},
                                 ActionSet([[-1.0], [0.0], [1.0]]))
    shield.observe(s, a, s_next); shield.refresh()            # learn
    episode = rollout(env, policy, safety=ShieldFilter(shield))  # enforce

stormpy and ltlf2dfa are optional (``pip install -e '.[shield]'``); without them the shield
runs with the built-in automaton and its own value iteration.
"""

from __future__ import annotations

from controllers.shield.abstraction import Abstraction, ActionSet, BinSpec, Cell
from controllers.shield.automaton import DFA, Product, compile_spec
from controllers.shield.configuration_shield import ShieldConfig
from controllers.shield.pac import IntervalModel, L1Ball, TransitionCounts, l1_radius
from controllers.shield.robust import RobustValues, robust_safety
from controllers.shield.shield import RobustShield, ShieldedEnv, ShieldFilter

__all__ = [
    "DFA",
    "Abstraction",
    "ActionSet",
    "BinSpec",
    "Cell",
    "IntervalModel",
    "L1Ball",
    "Product",
    "RobustShield",
    "RobustValues",
    "ShieldConfig",
    "ShieldFilter",
    "ShieldedEnv",
    "TransitionCounts",
    "compile_spec",
    "l1_radius",
    "robust_safety",
]
