"""Checkpoints shipped with the project (data-only packages, so pip installs them)."""
