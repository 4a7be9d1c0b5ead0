"""Hyperparameter search over (data-parallel) trials: grid, random, halving, Hyperband, ASHA."""
