"""Applications: everything a user runs, built on the core and the components.

The CLI (``cli/``, a thin layer over functions also callable from Python), the evaluation
harness and its backends (``evaluation/``), the live tuning page (``tune/``), benchmarks
(``bench/``), the showcase (``demo.py``), episode collection (``collect.py``), judge-vs-oracle
agreement (``judge.py``), robot deployment (``deploy.py``), experiments with their plots
(``experiments/``) and training scripts that need more than one component (``training/``).
Applications may import anything; nothing imports them.
"""
