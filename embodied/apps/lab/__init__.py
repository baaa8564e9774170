"""The lab: paper reproductions, apart from the product.

Each experiment runs a component against baselines (PDP vs DP, open- vs closed-loop VLA
steering, Demo2Reward, RL on judge rewards, robust-MDP shields, RePPO, inference latency) and
writes tables and plots; :mod:`embodied.apps.lab.stats` holds their shared statistics and table
formatting. Their commands are the ``embodied lab`` group (:mod:`embodied.apps.lab.cli`).

Nothing in the product imports this package (the import-linter contract ``lab`` in
``pyproject.toml``): the product CLI only mounts ``embodied lab`` by module name. The lab may
import anything: the core, the components and the product applications.
"""
