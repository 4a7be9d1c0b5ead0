"""Where the example project's data comes from: a plain function, run as one Dask task."""

import numpy as np
import pandas as pd


def load_measurements(n_rows=6_000, seed=0):
    """A table of sensor measurements and whether the part failed (column ``y``).

    Parameters
    ----------
    n_rows : int
    seed : int

    Returns
    -------
    pandas.DataFrame
        Columns ``temperature``, ``pressure``, ``vibration``, ``load`` and the label ``y``:
        failures come from high temperature *and* vibration together, so the product of
        neighbouring columns (``sensors.features``) helps a linear model.
    """
    rng = np.random.default_rng(seed)
    table = pd.DataFrame(
        {
            "temperature": rng.normal(size=n_rows),
            "pressure": rng.normal(size=n_rows),
            "vibration": rng.normal(size=n_rows),
            "load": rng.normal(size=n_rows),
        }
    )
    risk = table["temperature"] * table["pressure"] + 0.3 * rng.normal(size=n_rows)
    table["y"] = (risk > 0).astype(int)
    return table
