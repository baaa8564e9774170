"""embodied: robot learning and control on one closed loop.

Importing this package is cheap and stdlib-only (``python3 -m embodied.bootstrap`` runs
before any dependency is installed). Import the parts you need::

    from embodied.loop import rollout
    from sim import make
"""

__version__ = "0.1.0"
