"""Data for federated training: a real dataset split across silos the way parties differ.

Federated learning's hard case is data that is not identically distributed across parties:
one hospital sees mostly some diagnoses (label skew), one bank is ten times another (size
skew). :func:`load_silo` gives one silo's share of a scikit-learn dataset under such a split,
as the chunks a silo's loader returns (it runs on the silo's workers), and
:func:`load_held_out` the rows kept out of every silo, as a chunked dataset for evaluating
the merged model centrally. Both draw the same train/test split, so they never share a row::

    silos:
      hospital_a:
        load: taskdml.datasets:load_silo
        with: {name: digits, silo: 0, n_silos: 3, skew: label}
        resources: {hospital_a: 1}
"""

import numpy as np

__all__ = ["SKEWS", "load_held_out", "load_silo"]

SKEWS = ("iid", "label", "size")
"""How :func:`load_silo` splits the training rows: evenly at random, each label by Dirichlet
shares (``alpha``), or each silo half the size of the one before (4/7, 2/7, 1/7 of the rows
for three)."""


def _train_test(name, test_size, random_state):
    from sklearn.model_selection import train_test_split

    from taskdml.datasets._bundled import _sklearn_arrays

    X, y, _, _ = _sklearn_arrays(name)
    X = X / max(float(np.abs(X).max()), 1.0)  # digits' 0..16 to 0..1; scaled data unchanged
    return train_test_split(X, y, test_size=test_size, stratify=y, random_state=random_state)


def _silo_rows(y, n_silos, skew, alpha, rng):
    if skew == "label":
        parts = [[] for _ in range(n_silos)]
        for label in np.unique(y):
            rows = rng.permutation(np.flatnonzero(y == label))
            cuts = (np.cumsum(rng.dirichlet([alpha] * n_silos))[:-1] * len(rows)).astype(int)
            for part, piece in zip(parts, np.split(rows, cuts)):
                part.append(piece)
        return [rng.permutation(np.concatenate(part)) for part in parts]
    if skew == "size":  # each silo half the size of the one before
        shares = 0.5 ** np.arange(n_silos)
        shares /= shares.sum()
    else:
        shares = np.full(n_silos, 1 / n_silos)
    cuts = (np.cumsum(shares)[:-1] * len(y)).astype(int)
    return np.split(rng.permutation(len(y)), cuts)


def load_silo(
    name="digits",
    *,
    silo,
    n_silos=3,
    skew="label",
    alpha=0.3,
    test_size=0.2,
    chunk_size=50,
    random_state=0,
):
    """One silo's training rows of a scikit-learn dataset, as ``(X, y)`` chunks.

    Parameters
    ----------
    name : str, default="digits"
        A dataset of :func:`taskdml.datasets.load_sklearn` (features scaled into [-1, 1]).
    silo : int
        Which silo, ``0 <= silo < n_silos``.
    n_silos : int, default=3
    skew : {"iid", "label", "size"}, default="label"
        How the rows are split (:data:`SKEWS`).
    alpha : float, default=0.3
        Dirichlet concentration of the label skew: smaller is more skewed.
    test_size : float, default=0.2
        Share of the rows held out of every silo (:func:`load_held_out`).
    chunk_size : int, default=50
        Rows per chunk.
    random_state : int, default=0
        Seeds the train/test split and the silos' shares.

    Returns
    -------
    list of (ndarray, ndarray)

    Examples
    --------
    >>> from taskdml.datasets.silos import load_silo
    >>> sizes = [sum(len(y) for _, y in load_silo(silo=i, skew="size")) for i in range(3)]
    >>> sizes
    [821, 410, 206]
    """
    if skew not in SKEWS:
        raise ValueError(f"skew must be one of {', '.join(SKEWS)}; got {skew!r}.")
    if not 0 <= silo < n_silos:
        raise ValueError(f"silo must be in 0..{n_silos - 1}; got {silo!r}.")
    X, _, y, _ = _train_test(name, test_size, random_state)
    rows = _silo_rows(y, n_silos, skew, alpha, np.random.default_rng(random_state))[silo]
    return [
        (X[rows[i : i + chunk_size]], y[rows[i : i + chunk_size]])
        for i in range(0, len(rows), chunk_size)
    ]


def load_held_out(name="digits", *, test_size=0.2, chunk_size=100, random_state=0):
    """The rows :func:`load_silo` keeps out of every silo, as a chunked dataset.

    Parameters
    ----------
    name, test_size, random_state
        As for :func:`load_silo` (the same values give the same split).
    chunk_size : int, default=100

    Returns
    -------
    xarray.Dataset
        ``X`` (sample, feature) and ``y`` (sample), chunked along ``sample``.
    """
    import dask.array as da
    import xarray as xr

    _, X, _, y = _train_test(name, test_size, random_state)
    return xr.Dataset(
        {
            "X": (("sample", "feature"), da.from_array(X, chunks=(chunk_size, X.shape[1]))),
            "y": ("sample", da.from_array(y, chunks=chunk_size)),
        }
    )
