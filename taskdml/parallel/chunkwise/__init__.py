"""Chunk-wise transformers: a scikit-learn ``Pipeline``'s preprocessing fitted exactly over
chunks (encoders, imputers, scalers) and applied where each chunk lives, so that the engine
trains the last step on transformed chunks. May import the base modules and the merge
registry.
"""
