"""The tabular example's own code: the model, a scikit-learn Pipeline built by a factory."""
