"""A chunk-preserving train/test split: a hash, not a shuffle.

:func:`train_test_split` sends row ``i`` to the test side when ``splitmix64(offset + i)`` is
among the ``n_test`` smallest such hashes, ``offset`` being derived from the seed. Because
splitmix64 is a bijection the hashes never tie, so the test side has exactly ``n_test`` rows
(scikit-learn's count). The client finds the threshold and every output chunk's length by
hashing row *indices* only, in bounded memory, without touching data; each output chunk is then
computed from the input chunk in place (no rechunk, no gather). Input chunks that would leave an
empty output chunk are dropped from that output.
"""

import math
import numbers

import dask.array as da
import numpy as np
import xarray as xr
from dask.highlevelgraph import HighLevelGraph

from taskdml._compat import collection_meta
from taskdml._keys import key_name
from taskdml.datasets._common import _GOLDEN, _resolve_seed
from taskdml.exceptions import DataError, did_you_mean

_MIX2 = np.uint64(0x94D049BB133111EB)


_MIX1 = np.uint64(0xBF58476D1CE4E5B9)


# Rows hashed at once on the client by train_test_split (bounds its memory).
_HASH_BATCH = 1 << 20


def _row_hashes(start, stop, offset):
    """splitmix64 of ``offset + row`` for every row in ``[start, stop)`` (a bijection)."""
    z = np.arange(start, stop, dtype=np.uint64) + offset + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def _hash_batches(start, stop):
    for lo in range(start, stop, _HASH_BATCH):
        yield lo, min(lo + _HASH_BATCH, stop)


def _test_threshold(n_samples, n_test, offset):
    """The ``n_test``-th smallest row hash, found in two streaming passes over row indices."""
    histogram = np.zeros(1 << 16, dtype=np.int64)
    for lo, hi in _hash_batches(0, n_samples):
        top = (_row_hashes(lo, hi, offset) >> np.uint64(48)).astype(np.intp)
        histogram += np.bincount(top, minlength=1 << 16)
    cumulative = np.cumsum(histogram)
    bucket = int(np.searchsorted(cumulative, n_test))
    below = int(cumulative[bucket - 1]) if bucket else 0
    in_bucket = []
    for lo, hi in _hash_batches(0, n_samples):
        hashes = _row_hashes(lo, hi, offset)
        in_bucket.append(hashes[(hashes >> np.uint64(48)) == np.uint64(bucket)])
    return np.sort(np.concatenate(in_bucket))[n_test - below - 1]


def _test_counts(row_chunks, offset, threshold):
    bounds = np.cumsum((0,) + tuple(row_chunks)).tolist()
    counts = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        counts.append(
            sum(
                int(np.count_nonzero(_row_hashes(lo, hi, offset) <= threshold))
                for lo, hi in _hash_batches(start, stop)
            )
        )
    return bounds, counts


def _rows_on_side(block, axis, start, offset, threshold, test):
    """The rows of *block* (global rows from *start*) that fall on the test or train side."""
    in_test = _row_hashes(start, start + block.shape[axis], offset) <= threshold
    keep = in_test if test else ~in_test
    if hasattr(block, "tocsr"):  # a scipy.sparse chunk (hashed text): rows are axis 0
        return block.tocsr()[np.flatnonzero(keep)]
    return np.compress(keep, block, axis=axis)


def _split_dask(array, axis, offset, threshold, counts_cache):
    """Split a dask array along *axis* into ``(train, test)``, chunk by chunk in place."""
    row_chunks = array.chunks[axis]
    if row_chunks not in counts_cache:
        counts_cache[row_chunks] = _test_counts(row_chunks, offset, threshold)
    bounds, test_counts = counts_cache[row_chunks]
    other_blocks = [range(n) for i, n in enumerate(array.numblocks) if i != axis]
    outputs = []
    for side, test in (("train", False), ("test", True)):
        sizes = [
            c if test else (b - a - c) for a, b, c in zip(bounds[:-1], bounds[1:], test_counts)
        ]
        kept = [i for i, size in enumerate(sizes) if size > 0]
        name = key_name("train_test_split", array.name, offset, threshold, phase=side)
        layer = {}
        for j, i in enumerate(kept):
            for rest in np.ndindex(*[len(r) for r in other_blocks]):
                in_index = rest[:axis] + (i,) + rest[axis:]
                out_index = rest[:axis] + (j,) + rest[axis:]
                layer[(name, *out_index)] = (
                    _rows_on_side,
                    (array.name, *in_index),
                    axis,
                    bounds[i],
                    offset,
                    threshold,
                    test,
                )
        chunks = list(array.chunks)
        chunks[axis] = tuple(sizes[i] for i in kept)
        graph = HighLevelGraph.from_collections(name, layer, dependencies=[array])
        outputs.append(da.Array(graph, name, tuple(chunks), meta=collection_meta(array)))
    return outputs


def _n_test(test_size, n_samples):
    fn = "train_test_split"
    if isinstance(test_size, numbers.Integral) and not isinstance(test_size, bool):
        n_test = int(test_size)
        if not 1 <= n_test < n_samples:
            raise DataError(
                f"{fn}: an integer test_size must be between 1 and n_samples - 1 = "
                f"{n_samples - 1}, got {test_size!r}."
            )
        return n_test
    if isinstance(test_size, numbers.Real) and not isinstance(test_size, bool):
        if 0 < test_size < 1:
            n_test = math.ceil(test_size * n_samples)
            if n_test >= n_samples:
                raise DataError(
                    f"{fn}: test_size={test_size!r} of {n_samples} samples leaves no training "
                    "rows. Lower test_size."
                )
            return n_test
    raise DataError(
        f"{fn}: test_size must be a float in (0, 1) or an integer number of rows, "
        f"got {test_size!r}."
    )


def train_test_split(data, *, test_size=0.25, random_state=None):
    """Split a data set's rows into a train and a test set, without moving any chunk.

    Row ``i`` goes to the test set when a counter-based hash of ``(seed, i)`` is among the
    ``n_test`` smallest, so the split is exact in size (``n_test = ceil(test_size *
    n_samples)``, as scikit-learn), deterministic for a seed, and independent of how the data
    is chunked or how many workers hold it. Each output chunk is computed from one input
    chunk, in the same task location; input chunks that would give an empty output chunk are
    left out of that output, so every output chunk is non-empty. Row order is kept.

    Parameters
    ----------
    data : xarray.Dataset
        Data with a ``sample`` dim. Every variable along ``sample`` is split (dask-backed ones
        chunk by chunk, in-memory ones in memory); the others are kept as they are.
    test_size : float or int, default=0.25
        Fraction of rows in ``(0, 1)``, or number of rows, in the test set.
    random_state : int, RandomState, Generator or None
        Seed of the split. ``None`` draws a fresh seed once, at call time.

    Returns
    -------
    train, test : xarray.Dataset
        The two parts, in the same convention as *data*.

    Examples
    --------
    >>> from taskdml.datasets import make_classification, train_test_split
    >>> data = make_classification(1_000, 4, chunk_size=250, random_state=0)
    >>> train, test = train_test_split(data, test_size=0.2, random_state=0)
    >>> train.sizes["sample"], test.sizes["sample"]
    (800, 200)
    >>> len(test.X.chunks[0])
    4
    """
    fn = "train_test_split"
    if not isinstance(data, xr.Dataset):
        raise DataError(f"{fn}: data must be an xarray.Dataset, got {type(data).__name__}.")
    if "sample" not in data.dims:
        raise DataError(
            f"{fn}: data must have a 'sample' dim; found dims {list(data.dims)}."
            f"{did_you_mean('sample', list(data.dims))}"
        )
    n_samples = data.sizes["sample"]
    n_test = _n_test(test_size, n_samples)
    seed = _resolve_seed(fn, random_state)
    offset = np.random.SeedSequence(seed, spawn_key=(2,)).generate_state(1, np.uint64)[0]
    threshold = _test_threshold(n_samples, n_test, offset)

    counts_cache, memory_mask = {}, None
    parts = ({}, {})
    for var_name, var in data.variables.items():
        if "sample" not in var.dims:
            for part in parts:
                part[var_name] = var
            continue
        axis = var.dims.index("sample")
        if isinstance(var.data, da.Array):
            pieces = _split_dask(var.data, axis, offset, threshold, counts_cache)
        else:
            if memory_mask is None:
                memory_mask = _row_hashes(0, n_samples, offset) <= threshold
            values = np.asarray(var.values)
            pieces = [
                np.compress(~memory_mask, values, axis=axis),
                np.compress(memory_mask, values, axis=axis),
            ]
        for part, piece in zip(parts, pieces):
            part[var_name] = xr.Variable(var.dims, piece, attrs=var.attrs)
    coord_names = set(data.coords)
    return tuple(
        xr.Dataset(
            {k: v for k, v in part.items() if k not in coord_names},
            coords={k: v for k, v in part.items() if k in coord_names},
            attrs=data.attrs,
        )
        for part in parts
    )
