"""Training blocks: the chunks the engine is given, re-blocked so that every block is usable.

A replica ``partial_fit``\\s one block at a time, so a block must meet the estimator's minimum
batch (``IncrementalPCA`` needs ``n_components`` rows in its first batch, ``MiniBatchKMeans``
``n_clusters``: the merge rule states it, see
:func:`~taskdml.parallel.merge._registry.min_batch_rows`), and a ragged last chunk of a few
rows must not become some replica's first batch. :func:`plan_blocks` groups consecutive
chunks, in order, until each group holds at least ``min_rows`` rows; a small group left at the
end joins the group before it. The grouping depends only on the chunk sizes and the
estimator, never on placement or timing, so a seed's results stay reproducible.

A chunk that already has ``min_rows`` rows stays a group of its own: the engine trains on it
as given, under its own key, and nothing is copied, so well-sized data trains bit for bit as
before. A group of several chunks becomes one task that concatenates them
(:func:`~taskdml.parallel.engine._tasks.concatenate_parts`), keyed by the keys it reads
(:mod:`taskdml._keys`). One task per group rather than a re-chunked dask array: the inputs
are already persisted futures (or delayed objects without a client), a task of futures runs
where they are and nothing passes through the client, and only the few small chunks that
need it are copied.

``min_rows`` is the larger of the estimator's minimum and ``TINY_ROWS``. The floor is about
estimator validity, not per-block cost, and it is low on purpose. Measured on 2 cores (best of
3), ``SGDClassifier(loss="hinge", alpha=1e-5).partial_fit`` on 40 float64 features costs 0.36 ms
per call at 10 and at 100 rows, 0.52 ms at 1,000, 2.5 ms at 10,000 and 7.2 ms at 30,000: a
fixed 0.35 ms plus 0.22 µs a row, so a fixed cost of a few percent (5%) would take blocks of
~30,000 rows -- larger than the chunkings users choose on purpose (uneven chunks to balance
replicas, a few hundred rows to merge often), which keep their meaning: block ``i`` belongs to
replica ``i mod R`` and ``sync_every`` counts blocks. Below ``TINY_ROWS`` a block is all fixed
cost and no one's deliberate batch. At small blocks the round (a merge, milliseconds), not the
``partial_fit`` call, is the cost to amortise, and the sync period is what does that.

Chunks are never split: ``partial_fit`` costs less per row on larger blocks (0.52 µs a row at
1,000 rows, 0.25 µs at 10,000), so splitting only adds calls; the one gain, balance between
replicas when one chunk is far larger than the others, is left to the sync period.
"""

from taskdml.parallel.engine._chunks import Chunk
from taskdml.parallel.engine._tasks import concatenate_parts

TINY_ROWS = 10
"""Chunks with fewer rows than this are merged with their neighbours (unless all the data is
smaller)."""


def min_block_rows(estimator_min=1):
    """The minimum rows of a training block: ``max(estimator_min, TINY_ROWS)``.

    Parameters
    ----------
    estimator_min : int, default=1
        The fewest rows one ``partial_fit`` batch of the estimator accepts.

    Returns
    -------
    int
        The minimum; the data may hold fewer rows in all (then it is one block).
    """
    return max(int(estimator_min), TINY_ROWS)


def plan_blocks(rows, min_rows):
    """Group consecutive chunks so that every group holds at least *min_rows* rows.

    Parameters
    ----------
    rows : sequence of int
        The rows of each chunk, in order.
    min_rows : int
        The minimum rows of a group; a group of all the chunks may hold fewer.

    Returns
    -------
    list of list of int
        The chunk indices of each group, in order; a chunk of *min_rows* rows or more that
        follows a complete group is a group of its own.

    Examples
    --------
    >>> from taskdml.parallel.engine._blocks import plan_blocks
    >>> plan_blocks([299, 299, 299, 3], 5)
    [[0], [1], [2, 3]]
    >>> plan_blocks([2, 2, 9, 1, 1, 1], 4)
    [[0, 1], [2, 3, 4, 5]]
    """
    groups, current, held = [], [], 0
    for index, count in enumerate(rows):
        current.append(index)
        held += count
        if held >= min_rows:
            groups.append(current)
            current, held = [], 0
    if current:
        if groups:
            groups[-1].extend(current)
        else:
            groups.append(current)
    return groups


def reblock(chunks, groups):
    """The training blocks of *groups* (from :func:`plan_blocks`) over *chunks*.

    A group of one chunk is that chunk (its futures or delayed objects unchanged); a group of
    several is one delayed :func:`~taskdml.parallel.engine._tasks.concatenate_parts`
    per array, named by the keys it reads.

    Parameters
    ----------
    chunks : list of Chunk
        The chunks, as futures or delayed objects.
    groups : list of list of int
        Chunk indices of each block, in order.

    Returns
    -------
    list of Chunk
        One per group, ``index`` its position; merged parts are delayed objects.
    """
    import dask

    from taskdml import _keys

    blocks = []
    for position, group in enumerate(groups):
        if len(group) == 1:
            blocks.append(chunks[group[0]]._replace(index=position))
            continue
        parts = []
        for field in ("X", "y", "weight"):
            members = [getattr(chunks[i], field) for i in group]
            if members[0] is None:
                parts.append(None)
                continue
            name = _keys.key_name(
                "train", [getattr(m, "key", m) for m in members], field, phase="block"
            )
            parts.append(dask.delayed(concatenate_parts, pure=True)(*members, dask_key_name=name))
        blocks.append(Chunk(*parts, position))
    return blocks
