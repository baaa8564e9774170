"""Experiments: each runs a component against baselines and writes tables and plots."""
