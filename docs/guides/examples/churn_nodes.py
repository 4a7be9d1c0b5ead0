"""The project code of the Kedro/Hydra migration example: what were Kedro nodes.

Plain functions, no framework imports. ``migrate_kedro_hydra.yaml`` names them in its steps;
taskdml imports this module from the pipeline file's folder and ships it to the workers.
"""

import numpy as np
import pandas as pd
import xarray as xr


def load_customers(n_rows=4_000, seed=0):
    """A churn table (a Kedro catalog entry plus its loading node, in one function).

    Parameters
    ----------
    n_rows : int
    seed : int

    Returns
    -------
    pandas.DataFrame
        Columns ``tenure``, ``monthly_charges``, ``total_charges``, ``support_calls`` and the
        0/1 label ``y`` (taskdml reads the column ``y`` as the target).
    """
    rng = np.random.default_rng(seed)
    tenure = rng.integers(1, 72, n_rows).astype(float)
    monthly = rng.normal(70.0, 20.0, n_rows)
    table = pd.DataFrame(
        {
            "tenure": tenure,
            "monthly_charges": monthly,
            "total_charges": tenure * monthly * rng.uniform(0.9, 1.1, n_rows),
            "support_calls": rng.poisson(2.0, n_rows).astype(float),
        }
    )
    risk = 1.5 - 0.06 * tenure + 0.6 * table["support_calls"] + rng.normal(0.0, 1.0, n_rows)
    table["y"] = (risk > 0).astype(int)
    return table


def add_spend_per_month(chunk):
    """Append ``spend_per_month`` = total charges / tenure to one chunk of rows.

    Parameters
    ----------
    chunk : xarray.Dataset
        ``X`` (``sample`` x ``feature``) and ``y`` of one chunk.

    Returns
    -------
    xarray.Dataset
        The same rows with one more feature.
    """
    names = [str(name) for name in chunk["feature"].values]
    X = chunk["X"].values
    spend = X[:, names.index("total_charges")] / X[:, names.index("tenure")]
    return xr.Dataset(
        {"X": (("sample", "feature"), np.column_stack([X, spend])), "y": chunk["y"]},
        coords={"feature": [*names, "spend_per_month"]},
    )
