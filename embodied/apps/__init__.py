"""Applications: everything a user runs, built on the core and the components.

The CLI (``cli/``, a thin layer over functions also callable from Python), the evaluation
harness and its backends (``evaluation/``), the live tuning page (``tune/``), benchmarks
(``bench/``), the showcase (``demo.py``), episode collection (``collect.py``), judge-vs-oracle
agreement (``judge.py``), robot deployment (``deploy.py``), training scripts that need more
than one component (``training/``) and the built-in tasks they share (``reference_task.py``,
``route_task.py``). Applications may import anything; nothing imports them.

The lab (``lab/``, the ``embodied lab`` commands) holds the paper reproductions; it may import
the product, and nothing in the product imports it (``pyproject.toml``'s contract ``lab``).
"""
