"""Features computed per chunk, on the worker that holds it (a ``map:`` step)."""

import numpy as np
import xarray as xr


def add_interactions(chunk, n_pairs=2):
    """Append the products of neighbouring features: ``temperature*pressure``, ...

    Parameters
    ----------
    chunk : xarray.Dataset
        ``X`` (``sample`` x ``feature``) and ``y`` of one chunk of rows.
    n_pairs : int
        How many products to append (at most ``n_features - 1``).

    Returns
    -------
    xarray.Dataset
        The same rows with ``n_pairs`` more features.
    """
    names = [str(name) for name in chunk["feature"].values]
    X = chunk["X"].values
    products = X[:, :n_pairs] * X[:, 1 : n_pairs + 1]
    return xr.Dataset(
        {"X": (("sample", "feature"), np.hstack([X, products])), "y": chunk["y"]},
        coords={"feature": names + [f"{a}*{b}" for a, b in zip(names, names[1 : n_pairs + 1])]},
    )
