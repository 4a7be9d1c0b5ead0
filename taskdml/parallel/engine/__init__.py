"""The data-parallel engine: :func:`train` and what its replicas run.

:mod:`._train` plans a training (chunks, placement, strategy) and drives it (sync rounds,
async parameter server, sequential); :mod:`._replica` is one replica's long-running task;
:mod:`._period` chooses ``sync_every="auto"``; :mod:`._chunks` inspects every chunk once;
:mod:`._blocks` merges chunks under the estimator's minimum batch; :mod:`._stream` streams
chunks that do not fit; :mod:`._elastic` re-plans when workers come and go; :mod:`._tasks`
holds the pure task functions the searches share.

May import the base modules, :mod:`taskdml.cache._checkpoints`, the merge rules, the
collective and the chunk-wise transformers.
"""
