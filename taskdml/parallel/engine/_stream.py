"""Streaming training data: chunks read by the replicas themselves, a bounded number ahead.

A training either *persists* its data (every chunk computed once into the workers' memory,
each replica pinned where its chunks are) or *streams* it: the replicas receive, instead of
chunks, a :class:`Source` per chunk — the graph that reads or builds that one block — and
read their chunks as they train, ``prefetch`` ahead in a background thread so that reading
overlaps ``partial_fit``, dropping each chunk after use. A streamed replica holds at most
``prefetch + 1`` chunks, whatever the size of the data, and a reader decoding the next one
may hold a second copy of it while it does (a Zarr read does), so a worker's memory is
bounded by

    replicas on it × largest chunk × (prefetch + 2) + model state × (replicas + 2)
    (the all-gather receives every replica's model, the replica copies the global one)

plus what the worker holds anyway (its imports: about 270 MiB with scikit-learn and zarr).
Measured on 30.6 MiB chunks of a Zarr store, two 600 MiB workers: peaks of 337, 401 and
463 MiB with ``prefetch`` 0, 2 and 4 (31 MiB a chunk, as the formula says; 61, 122 and
184 MiB above the imports).

:func:`choose` decides between the two from the data's size and the workers' memory
(``data="auto"``): data that takes at most :data:`PERSIST_SHARE` of the memory the workers
have free under their limits is persisted (read once, trained on from memory every epoch),
larger data streams. Data already persisted stays so. A source is read in the replica's
process with dask's synchronous scheduler, so a chunk of a Zarr store, a NetCDF file, a
Parquet or CSV partition, or any dask array built from a reader is read on whichever worker
trains on it; readers of one chunk at the same time in one process (two trials of a search on
one worker) share one read.
"""

import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import os
import queue
import threading

from taskdml.parallel.engine._chunks import Chunk

DATA_MODES = ("auto", "persist", "stream")
"""The values of ``data``: how the training data reaches the replicas."""

PERSIST_SHARE = 0.5
"""The largest share of the workers' free memory (their limits less what their processes
hold) that ``data="auto"`` persists."""

DEFAULT_PREFETCH = 2
"""Chunks a streaming replica reads ahead of the one it trains on."""


class Source:
    """One block of a dask collection, not yet read: its graph, culled to that block.

    Parameters
    ----------
    graph : dict
        The tasks that compute the block (a culled dask graph).
    key : str or tuple
        The block's key in *graph*.
    """

    __slots__ = ("graph", "key")

    def __init__(self, graph, key):
        self.graph = graph
        self.key = key

    def __repr__(self):
        return f"Source({self.key!r}, {len(self.graph)} tasks)"

    def read(self):
        """Compute the block here, with the synchronous scheduler (one reader per process and
        block at a time: concurrent readers of the same block share its read)."""
        return _shared_read(self.key, lambda: _compute(self.graph, self.key))


def _compute(graph, key):
    import dask

    return dask.get(graph, key)


_READS = {}  # key -> [Future of the block, readers]; only while someone is reading it
_READS_LOCK = threading.Lock()


def _shared_read(key, read):
    with _READS_LOCK:
        entry = _READS.get(key)
        first = entry is None
        if first:
            entry = _READS[key] = [concurrent.futures.Future(), 0]
        entry[1] += 1
    try:
        if first:
            try:
                entry[0].set_result(read())
            except BaseException as error:
                entry[0].set_exception(error)
        return entry[0].result()
    finally:
        with _READS_LOCK:
            entry[1] -= 1
            if entry[1] == 0:
                del _READS[key]


def sources(array):
    """A :class:`Source` per block of a dask *array* (or dataframe), keyed by block key."""
    from dask.core import flatten
    from dask.utils import ensure_dict

    graph = array.__dask_graph__()
    return {
        key: Source(ensure_dict(graph.cull({key})), key) for key in flatten(array.__dask_keys__())
    }


def as_streamed(chunk, found):
    """*chunk* with every part that is a delayed block of a streamed array replaced by its
    :class:`Source` from *found* (``{key: Source}``); futures and arrays stay as they are."""
    parts = [
        found.get(getattr(part, "key", None), part) if part is not None else None
        for part in chunk[:3]
    ]
    return Chunk(*parts, chunk.index)


def read_part(part):
    """*part* read if it is a :class:`Source`, else as it is."""
    return part.read() if isinstance(part, Source) else part


def read_chunk(chunk):
    """*chunk* (a named tuple of parts) with its :class:`Source` parts read."""
    return type(chunk)(*map(read_part, chunk))


def is_streamed(chunk):
    return any(isinstance(part, Source) for part in chunk)


def read_ahead(chunks, prefetch=DEFAULT_PREFETCH):
    """Yield *chunks* read, in order, reading up to *prefetch* ahead in a background thread.

    At most ``prefetch + 1`` read chunks exist at once: the one the caller trains on and
    those read ahead (the caller drops its reference before asking for the next). Chunks
    without a :class:`Source` pass through unread, and no thread starts for them. A read
    error is raised where the chunk would have been yielded.
    """
    chunks = list(chunks)
    with reused_memory():
        if prefetch <= 0 or not any(is_streamed(chunk) for chunk in chunks):
            yield from map(read_chunk, chunks)
        else:
            yield from _read_in_thread(chunks, prefetch)


def _read_in_thread(chunks, prefetch):
    """:func:`read_ahead`'s reading thread, *prefetch* chunks ahead of the caller."""
    slots = threading.Semaphore(prefetch + 1)
    ready = queue.Queue()
    stop = threading.Event()

    def reader():
        for chunk in chunks:
            slots.acquire()
            if stop.is_set():
                return
            try:
                ready.put((read_chunk(chunk), None))
            except Exception as error:
                ready.put((None, error))
                return

    threading.Thread(target=reader, name="taskdml-read-ahead", daemon=True).start()
    try:
        for _ in chunks:
            chunk, error = ready.get()
            if error is not None:
                raise error
            yield chunk
            del chunk
            slots.release()
    finally:
        stop.set()
        slots.release()  # a reader waiting for a slot sees the stop


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_MAX = 32 * 2**20  # the largest glibc accepts on 64-bit
_KEPT = 2**30
_readers = 0  # streaming readers in this process: the memory settings are the process's
_readers_lock = threading.Lock()


def _glibc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


@contextlib.contextmanager
def reused_memory():
    """While chunks stream through this process, keep freed chunk memory for the next chunk.

    glibc gives every block over 128 KiB its own mapping and unmaps it when freed
    (distributed's nanny also sets ``MALLOC_TRIM_THRESHOLD_`` to 64 KiB, so freed heap goes
    back as well): each chunk read then faults in fresh pages, and so do scikit-learn's
    per-call temporaries. Measured with one worker, a 4M × 40 Zarr store in 15.6 MiB chunks:
    streaming cost 1.16× persisting per epoch (``prefetch=2``), and 0.61× with blocks up to
    32 MiB served from the heap and freed heap kept. So while any reader streams here, blocks
    up to 32 MiB come from the heap and freed memory stays; when the last one ends, the
    process's settings (its ``MALLOC_*_`` environment, else glibc's defaults) come back and
    the kept memory is returned (``malloc_trim``). A no-op without glibc.
    """
    global _readers
    libc = _glibc()
    if libc is None:
        yield
        return
    with _readers_lock:
        _readers += 1
        if _readers == 1:
            libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
            libc.mallopt(_M_TRIM_THRESHOLD, _KEPT)
    try:
        yield
    finally:
        with _readers_lock:
            _readers -= 1
            if _readers == 0:
                libc.mallopt(
                    _M_TRIM_THRESHOLD, int(os.environ.get("MALLOC_TRIM_THRESHOLD_", 2**17))
                )
                libc.mallopt(
                    _M_MMAP_THRESHOLD, int(os.environ.get("MALLOC_MMAP_THRESHOLD_", 2**17))
                )
                libc.malloc_trim(0)


def choose(data, nbytes, memory_limits, persisted, memory_used=None):
    """``(mode, facts)``: ``"persist"`` or ``"stream"``, and what the choice was made from.

    Parameters
    ----------
    data : {"auto", "persist", "stream"}
        The caller's choice; ``"auto"`` persists data of at most :data:`PERSIST_SHARE` of the
        memory the workers have free under their limits, and streams the rest. Data in the
        workers' memory already stays there, whatever the choice.
    nbytes : int
        The training data's size.
    memory_limits : list of int
        Every worker's memory limit in bytes (``0`` or ``None``: none set).
    persisted : bool
        Whether the data is in the workers' memory already (built on futures: an earlier
        step's output, or persisted).
    memory_used : list of int, optional
        What each worker's process holds now (its imports, other data): an idle worker with
        scikit-learn holds about 280 MiB, so half a 600 MiB limit is not free.
    """
    if data not in DATA_MODES:
        raise ValueError(f"data must be one of {', '.join(DATA_MODES)}, got {data!r}.")
    unlimited = not memory_limits or not all(memory_limits)
    used = memory_used or [0] * len(memory_limits)
    free = None if unlimited else int(sum(max(0, a - b) for a, b in zip(memory_limits, used)))
    facts = {
        "requested": data,
        "nbytes": int(nbytes),
        "memory_limit_total": None if unlimited else int(sum(memory_limits)),
        "memory_free_total": free,
    }
    if persisted:  # its blocks are futures: there is no graph to read them from
        mode, facts["reason"] = "persist", "the data is in the workers' memory already"
    elif data != "auto":
        mode = data
    elif free is None:
        mode, facts["reason"] = "persist", "the workers have no memory limit"
    else:
        fits = nbytes <= PERSIST_SHARE * free
        mode = "persist" if fits else "stream"
        facts["reason"] = (
            f"the data is {nbytes / max(free, 1):.0%} of the memory the workers have free "
            f"({'at most' if fits else 'over'} {PERSIST_SHARE:.0%})"
        )
    return mode, dict(facts, mode=mode)


def choose_for(client, data, nbytes, persisted=False, workers=None):
    """:func:`choose` against the memory of the cluster's workers (*workers*, default all),
    or of this machine without a client.

    What a worker's process holds is asked of the worker now, not taken from the scheduler's
    last heartbeat: a worker importing scikit-learn on its event loop (a warm cluster, just
    started) sends no heartbeat meanwhile, and the scheduler's figure misses ~280 MiB per
    worker. A worker that does not answer counts with the scheduler's figure. Data in the
    workers' memory already (*persisted*) stays there, so nothing is asked (two round trips
    a call: ``scheduler_info`` and ``Client.run`` on every worker).
    """
    if persisted:  # in the workers' memory already, whatever their memory: nothing to ask
        return choose(data, nbytes, [], persisted)
    if client is None:
        import psutil

        memory = psutil.virtual_memory()
        limits, used = [memory.total], [memory.total - memory.available]
    else:
        infos = {
            address: info
            for address, info in client.scheduler_info(n_workers=-1)["workers"].items()
            if workers is None or address in workers
        }
        now = client.run(_process_memory, workers=list(infos), on_error="ignore") if infos else {}
        limits = [info.get("memory_limit") for info in infos.values()]
        used = [
            now.get(address, info.get("metrics", {}).get("memory", 0))
            for address, info in infos.items()
        ]
    return choose(data, nbytes, limits, persisted, used)


def _process_memory():
    """The resident memory of this process (what the scheduler's ``memory`` metric is)."""
    import psutil

    return psutil.Process().memory_info().rss


def memory_bound(replicas_per_worker, chunk_bytes, prefetch, model_bytes, replicas):
    """The bytes a streaming training holds on one worker, beyond the worker's own (the
    formula of the module docstring)."""
    return int(replicas_per_worker * chunk_bytes * (prefetch + 2) + model_bytes * (replicas + 2))
