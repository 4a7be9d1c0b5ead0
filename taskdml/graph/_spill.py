"""Partitions larger than memory: a partition's CSR on its worker's disk, streamed in row blocks.

:func:`~taskdml.graph._partition.partition_graph` with ``out_of_core=True`` (or chosen by
:func:`should_spill` when the partitions would not fit the workers' memory limits) builds
each partition with :func:`~taskdml.graph._partition.spill`, which hands :func:`spill_csr`
its piece of each edge chunk, instead of assembling it in memory. The partition is the same
:class:`~taskdml.graph._partition.Partition` (its vertex ranges,
mirrors, send lists, out-weights and self-loops are in memory: they are the size of its
vertices), but its ``csr`` is a :class:`SpilledCSR`: the row pointers and the row sums in
memory, the column indices and the weights in two files under the worker's local directory,
cut into *row blocks* of at most ``block_edges`` entries. A superstep's gather
(:func:`taskdml.graph._program.gather`) reads one block at a time into two buffers and
gathers its rows, so a worker holds its vertex values and one block of edges, whatever the
size of the graph.

How a partition is built without holding its edges (one task on its worker), from the edge
chunks it computes one at a time itself (a Zarr store read lazily, or a generator's chunks;
never gathered):

1. a first pass over the chunks counts the in-edges of each of its rows, sums the
   out-weights and self-loops of its vertices, and marks the sources it reads (a mask of one
   byte per vertex of the graph, whose remote ones are its mirrors); from the counts, the
   row blocks;
2. a second pass writes each in-edge, as ``(row, column, weight)``, to the bucket file of
   its row block;
3. each bucket is read alone, made a CSR (duplicates summed, columns sorted, as the
   in-memory partition does) and appended to the two files.

So the store is read twice per partition (and each chunk is split for every partition, as
the in-memory path splits it once for all), and the largest thing in memory is one chunk or
one block. A row with more in-edges than ``block_edges`` is a block of its own: the bound is
then that row's in-degree (:attr:`SpilledCSR.resident_bytes` records the real one).

The files live in the worker's local directory, which distributed deletes when the worker
closes; a partition that was never pickled also deletes its own files when it is garbage
collected. A pickled one leaves them (distributed may have spilled it to disk to load it
again, and its copy reads the same files).

Imports: numpy and scipy; dask and distributed inside the task functions.
"""

import os
import shutil
import tempfile
import uuid
import weakref

import numpy as np

BLOCK_EDGES = 1 << 20
"""The most in-edges of one row block by default (12-16 MiB of indices and weights)."""

BYTES_PER_EDGE = 64
"""What one in-edge costs while a partition is assembled in memory: its row, source, column
and weight, and scipy's copies of them into a sorted CSR."""

MEMORY_SHARE = 0.5
"""The share of a worker's memory limit its in-memory partitions may take; beyond, they go
out of core."""


def should_spill(in_edges_per_worker, memory_limit):
    """Whether partitions holding *in_edges_per_worker* in-edges on a worker of
    *memory_limit* bytes (0 or ``None``: no limit) go out of core."""
    if not memory_limit:
        return False
    return in_edges_per_worker * BYTES_PER_EDGE > MEMORY_SHARE * memory_limit


class EdgeChunks:
    """The edge chunks of a graph, for a task to compute one at a time where it runs: a
    plain object holding each chunk's ``(src, dst, weight)`` delayed objects, so that dask
    does not make them the task's dependencies (which would bring every chunk at once)."""

    def __init__(self, blocks, token):
        self.blocks, self.token = blocks, token

    def __len__(self):
        return len(self.blocks)

    def __dask_tokenize__(self):
        return self.token

    def read(self, c):
        """Chunk *c* as numpy arrays ``(src, dst, weight or None)``."""
        import dask

        src, dst, weight = self.blocks[c]
        if weight is None:
            return (*dask.compute(src, dst, scheduler="sync"), None)
        return dask.compute(src, dst, weight, scheduler="sync")


class SpilledCSR:
    """A partition's in-edges as a CSR whose indices and weights are on disk.

    Offers what the graph code reads of a ``scipy.sparse.csr_matrix``: ``shape``, ``nnz``,
    ``indptr`` and ``sum(axis=1)``, and :meth:`row_blocks`, which the gather streams.

    Attributes
    ----------
    directory : str
        Where its two files are.
    shape : tuple of int
    indptr : numpy.ndarray
        The row pointers (in memory: one per vertex).
    blocks : numpy.ndarray
        The first row of each block, then the number of rows.
    resident_bytes : int
        The bytes of edges one :meth:`row_blocks` holds: its two buffers and a block's row
        pointers.
    """

    def __init__(self, directory, shape, indptr, index_dtype, blocks, row_sums):
        self.directory, self.shape = directory, tuple(shape)
        self.indptr, self.index_dtype = indptr, np.dtype(index_dtype)
        self.blocks, self.row_sums = blocks, row_sums
        sizes = indptr[blocks[1:]] - indptr[blocks[:-1]]
        self.capacity = int(sizes.max()) if len(sizes) else 0
        rows = int(np.diff(blocks).max()) if len(blocks) > 1 else 0
        self.resident_bytes = int(
            self.capacity * (self.index_dtype.itemsize + 8) + (rows + 1) * self.index_dtype.itemsize
        )
        self._finalizer = weakref.finalize(self, shutil.rmtree, directory, True)

    def __getstate__(self):
        self._finalizer.detach()  # a copy may read the files after this object is gone
        state = dict(vars(self))
        del state["_finalizer"]
        return state

    def __setstate__(self, state):
        vars(self).update(state)
        self._finalizer = None

    @property
    def nnz(self):
        """The number of stored entries."""
        return int(self.indptr[-1])

    def sum(self, axis=None):
        """The row sums (``axis=1``, as scipy's, a column), kept from when it was built."""
        if axis != 1:
            raise ValueError("a spilled CSR keeps its row sums only (axis=1).")
        return self.row_sums[:, None]

    def row_blocks(self):
        """Yield ``(first row, stop row, block)``, each block a ``scipy.sparse.csr_matrix``
        of those rows over all columns, read in order into two buffers reused from block to
        block (the block is valid until the next one is read)."""
        import scipy.sparse as sp

        indices = np.empty(self.capacity, self.index_dtype)
        data = np.empty(self.capacity)
        with (
            open(os.path.join(self.directory, "indices"), "rb", buffering=0) as index_file,
            open(os.path.join(self.directory, "data"), "rb", buffering=0) as data_file,
        ):
            for r0, r1 in zip(self.blocks[:-1].tolist(), self.blocks[1:].tolist()):
                e0, e1 = int(self.indptr[r0]), int(self.indptr[r1])
                _read_into(index_file, indices[: e1 - e0])
                _read_into(data_file, data[: e1 - e0])
                pointers = (self.indptr[r0 : r1 + 1] - e0).astype(self.index_dtype)
                block = sp.csr_matrix(
                    (data[: e1 - e0], indices[: e1 - e0], pointers),
                    shape=(r1 - r0, self.shape[1]),
                    copy=False,
                )
                yield r0, r1, block

    def gather(self, gather_rows):
        """``gather_rows(block)`` of every block, stacked: the gather of all rows."""
        out = None
        for r0, r1, block in self.row_blocks():
            gathered = gather_rows(block)
            if out is None:
                out = np.empty((self.shape[0], *gathered.shape[1:]), gathered.dtype)
            out[r0:r1] = gathered
        if out is None:  # no rows
            import scipy.sparse as sp

            out = gather_rows(sp.csr_matrix(self.shape))
        return out


def _read_into(file, array):
    view = memoryview(array).cast("B")
    done = 0
    while done < len(view):
        n = file.readinto(view[done:])
        if not n:
            raise OSError(f"a spilled partition's file {file.name!r} ended early.")
        done += n


def _blocks_of(counts, block_edges):
    """Row blocks of at most *block_edges* entries (a heavier row alone): their first rows
    and then the number of rows."""
    ends = np.cumsum(counts)
    starts, row = [0], 0
    while row < len(counts):
        before = ends[row - 1] if row else 0
        stop = int(np.searchsorted(ends, before + block_edges, side="right"))
        row = max(stop, row + 1)
        starts.append(min(row, len(counts)))
    return np.asarray(starts, dtype=np.int64)


def spill_csr(bounds, index, split, block_edges, name):
    """The in-edges of partition *index* written out of core on the worker that runs it
    (see the module docstring), as ``(csr, mirrors, out_weight, loops)``; ``split()`` yields
    its piece of each edge chunk, one chunk at a time, as ``(local rows, global sources,
    weights or None, out-weights)`` (called twice: the two passes)."""
    import scipy.sparse as sp

    start, stop = int(bounds[index]), int(bounds[index + 1])
    n_local = stop - start
    counts = np.zeros(n_local, np.int64)
    out_weight, loops = np.zeros(n_local), np.zeros(n_local)
    read = np.zeros(int(bounds[-1]), bool)  # the vertices its edges come from

    def pieces():
        for rows, sources, weights, leaving in split():
            yield rows, sources, (np.ones(len(rows)) if weights is None else weights), leaving

    for rows, sources, weights, leaving in pieces():
        counts += np.bincount(rows, minlength=n_local)
        out_weight += leaving
        looped = sources == rows + start
        loops += np.bincount(rows[looped], weights[looped], n_local)
        read[sources] = True
    read[start:stop] = False
    remote = np.flatnonzero(read)
    del read
    owners = np.searchsorted(bounds, remote, side="right") - 1
    mirrors = {int(q): remote[owners == q] for q in np.unique(owners)}
    n_columns = n_local + len(remote)
    blocks = _blocks_of(counts, block_edges)
    ends = np.concatenate([[0], np.cumsum(counts)])
    largest = int(np.diff(ends[blocks]).max(initial=0))
    index_dtype = np.int32 if max(n_columns, largest) < 2**31 else np.int64
    del counts, ends

    directory = os.path.join(_local_directory(), f"taskdml-graph-{name}-{index}-{uuid.uuid4().hex}")
    os.makedirs(directory)
    record = np.dtype([("row", index_dtype), ("column", index_dtype), ("weight", np.float64)])
    buckets = [os.path.join(directory, f"bucket-{b}") for b in range(len(blocks) - 1)]
    files = [open(path, "wb") for path in buckets]  # noqa: SIM115 (closed below)
    try:
        for rows, sources, weights, _ in pieces():
            own = (sources >= start) & (sources < stop)
            columns = np.empty(len(sources), np.int64)
            columns[own] = sources[own] - start
            columns[~own] = n_local + np.searchsorted(remote, sources[~own])
            block_of = np.searchsorted(blocks, rows, side="right") - 1
            order = np.argsort(block_of, kind="stable")
            at = np.searchsorted(block_of[order], np.arange(len(blocks)))
            for b in np.flatnonzero(np.diff(at)):
                chosen = order[at[b] : at[b + 1]]
                entries = np.empty(len(chosen), record)
                entries["row"], entries["column"] = rows[chosen], columns[chosen]
                entries["weight"] = weights[chosen]
                entries.tofile(files[b])
    finally:
        for file in files:
            file.close()

    indptr = np.zeros(n_local + 1, np.int64)
    row_sums = np.zeros(n_local)
    with (
        open(os.path.join(directory, "indices"), "wb") as index_file,
        open(os.path.join(directory, "data"), "wb") as data_file,
    ):
        for b, path in enumerate(buckets):
            r0, r1 = int(blocks[b]), int(blocks[b + 1])
            entries = np.fromfile(path, record)
            os.remove(path)
            block = sp.csr_matrix(
                (entries["weight"], (entries["row"] - r0, entries["column"])),
                shape=(r1 - r0, n_columns),
            )
            block.sum_duplicates()
            block.indices.astype(index_dtype, copy=False).tofile(index_file)
            block.data.astype(np.float64, copy=False).tofile(data_file)
            indptr[r0 + 1 : r1 + 1] = indptr[r0] + block.indptr[1:]
            row_sums[r0:r1] = np.asarray(block.sum(axis=1)).ravel()
    csr = SpilledCSR(directory, (n_local, n_columns), indptr, index_dtype, blocks, row_sums)
    return csr, mirrors, out_weight, loops


def _local_directory():
    """The running worker's local directory (this process's temporary one without)."""
    try:
        from distributed import get_worker

        return get_worker().local_directory
    except ValueError:
        return tempfile.gettempdir()
