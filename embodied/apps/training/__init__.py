"""Training scripts that join several components (sim rollouts to train a judge, scripted
demonstrations to train the tiny VLA)."""
