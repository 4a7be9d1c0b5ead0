"""Vertex results as table columns: what a pipeline needs between a graph step and a model.

:func:`vertex_table` makes a noisy table of per-vertex features with the graph's ground truth
as the label (the tabular side of the example ``pipelines/graph_features.yaml``), and
:func:`join_vertex_features` appends vertex results (PageRank, propagated features, label
distributions: any Dataset along ``vertex``) to a table's ``X`` as columns, row ``i`` being
vertex ``i``. Both are graph builders (taskdml's own functions run in the client): they
return chunked Datasets and compute nothing.
"""

import numpy as np


def vertex_table(graph, label="community", n_features=4, noise=3.0, random_state=None):
    """A table of one row per vertex: ``y`` the graph's vertex variable *label*, ``X`` a
    class signal drowned in Gaussian noise (as transactions' own fields, weakly telling).

    Parameters
    ----------
    graph : xarray.Dataset
        A graph with a vertex variable *label* (``make_sbm``'s ``community``).
    label : str, default="community"
    n_features : int, default=4
    noise : float, default=3.0
        The noise's standard deviation; the signal is ``+-1`` per feature.
    random_state : int, optional

    Returns
    -------
    xarray.Dataset
        ``X`` (``sample`` x ``feature``) and ``y`` along ``sample``, chunked as *label*.

    Examples
    --------
    >>> from taskdml.datasets import make_sbm
    >>> table = vertex_table(make_sbm([30, 20], 0.2, 0.01, random_state=0), random_state=0)
    >>> table.X.shape, int(table.y.sum())
    ((50, 4), 20)
    """
    import dask.array as da
    import xarray as xr

    y = graph[label].data
    y = y if isinstance(y, da.Array) else da.from_array(np.asarray(y))
    rng = da.random.default_rng(random_state)
    signs = np.random.default_rng(random_state).choice([-1.0, 1.0], (int(y.max()) + 1, n_features))
    signal = y.map_blocks(lambda b: signs[b], new_axis=1, chunks=(y.chunks[0], (n_features,)))
    noise_ = rng.normal(0.0, noise, (y.shape[0], n_features), chunks=(y.chunks[0], n_features))
    return xr.Dataset({"X": (("sample", "feature"), signal + noise_), "y": (("sample",), y)})


def join_vertex_features(data, results=None, scores=None):
    """*data*'s ``X`` with the variables of each vertex result appended as columns.

    Parameters
    ----------
    data : xarray.Dataset
        ``X`` (``sample`` x ``feature``) and ``y``, one row per vertex.
    results, scores : xarray.Dataset or list of them, optional
        Vertex results (the graph algorithms' Datasets): each variable along ``vertex``
        becomes a column, each 2-D one as many columns (*results*' first, then *scores*').

    Returns
    -------
    xarray.Dataset
        ``X`` with the new columns and ``y``, chunked as *data*.
    """
    import dask.array as da
    import xarray as xr

    X = data.X.data
    columns = [X]
    given = [r for r in (results, scores) if r is not None]
    for result in [r for g in given for r in (g if isinstance(g, (list, tuple)) else [g])]:
        for variable in result.data_vars.values():
            block = variable.data if isinstance(variable.data, da.Array) else da.asarray(variable)
            block = block.astype(float)
            block = block[:, None] if block.ndim == 1 else block
            columns.append(block.rechunk((X.chunks[0], block.shape[1])))
    X = da.concatenate(columns, axis=1)
    return xr.Dataset({"X": (("sample", "feature"), X), "y": data.y})
