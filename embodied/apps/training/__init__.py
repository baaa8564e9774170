"""Training scripts that join several components (e.g. sim rollouts to train a judge)."""
