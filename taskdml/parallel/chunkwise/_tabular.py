"""scikit-learn ``Pipeline``\\s and ``ColumnTransformer``\\s on chunked data.

A pipeline is trained in two phases, both on the workers that hold the chunks:

1. **Transformers, chunk-wise and exact.** The steps before the last are fitted one after
   the other. A leaf transformer is fitted by its *chunk-wise fit*: a task per chunk reduces
   the chunk to a small summary (the categories seen, sums and counts, a scaler fitted on
   the chunk), and the summaries are combined in the client into the transformer fitted on
   all the data. A ``Pipeline`` inside fits its steps in turn, transforming the chunks
   between them; a ``ColumnTransformer`` fits each of its transformers on its columns of
   the chunks, then is put together from them (in a task, on the first chunk). The built-in
   chunk-wise fits (:func:`register_chunkwise` adds more):

   - ``OneHotEncoder``, ``OrdinalEncoder``: the categories of every chunk; the encoder is
     fitted on their union, so its categories, in scikit-learn's own sorted order, and its
     output equal a fit on all the data. Infrequent categories (``min_frequency``,
     ``max_categories``) need counts and are refused.
   - ``SimpleImputer``: ``mean`` from per-column sums and counts (equal up to rounding),
     ``most_frequent`` from merged value counts (ties to the smallest value, as
     scikit-learn), ``constant`` as it is. ``median`` is refused: an exact median needs
     every value in one place; use ``mean`` or ``most_frequent``.
   - every estimator whose merge rule is exact (``StandardScaler``, ``MinMaxScaler``,
     ``MaxAbsScaler``, the naive Bayes counts, ...): ``partial_fit`` per chunk, then the
     rule's merge.
   - stateless transformers (``FunctionTransformer``; ``requires_fit=False``): fitted on
     the first chunk.

2. **The final estimator, data-parallel.** Every chunk is transformed where it lives (dense
   float64 blocks: a sparse ``OneHotEncoder`` output is densified per chunk) and the last
   step is trained by the engine on those blocks, like any estimator.

Predictions of the fitted pipeline run per chunk; a category unseen in training under
``handle_unknown="error"`` is reported with the column's name and the unseen values.
"""

import ast
import copy
import dataclasses
import re
from collections import Counter
from collections.abc import Callable

import numpy as np

from taskdml import _keys
from taskdml._apply import map_parts, stacked
from taskdml._client import resolve_client
from taskdml._registry import ClassRegistry
from taskdml.exceptions import DataError


@dataclasses.dataclass(frozen=True)
class ChunkwiseFit:
    """How to fit one transformer family chunk by chunk.

    Parameters
    ----------
    summarise : callable
        ``summarise(estimator, X_chunk) -> summary``: a task on one chunk; the unfitted
        *estimator* is not modified. The summary should be small.
    combine : callable
        ``combine(estimator, summaries, rows) -> fitted``: the estimator fitted on all the
        chunks, from their summaries and row counts.
    exact : bool
        Whether the result equals a fit on all the data (up to rounding).
    family : str
        Short name, for messages.
    """

    summarise: Callable
    combine: Callable
    exact: bool = True
    family: str = ""


def register_chunkwise(estimator_class, summarise, combine, *, exact=True, family=None):
    """Register a chunk-wise fit for a transformer class (and its subclasses).

    Parameters
    ----------
    estimator_class : type
    summarise, combine : callable
        See :class:`ChunkwiseFit`.
    exact : bool, default=True
    family : str, optional
        Default: the class name.

    Returns
    -------
    ChunkwiseFit

    Examples
    --------
    >>> from sklearn.preprocessing import Normalizer
    >>> from taskdml.parallel.chunkwise._tabular import register_chunkwise, get_chunkwise
    >>> class MyNormalizer(Normalizer):
    ...     pass
    >>> rule = register_chunkwise(MyNormalizer, lambda est, X: None,
    ...                           lambda est, summaries, rows: est)
    >>> get_chunkwise(MyNormalizer()).family
    'MyNormalizer'
    """
    if not isinstance(estimator_class, type):
        raise TypeError(f"register_chunkwise expects a class, got {estimator_class!r}.")
    rule = ChunkwiseFit(summarise, combine, exact, family or estimator_class.__name__)
    CHUNKWISE.register(estimator_class, rule)
    return rule


def get_chunkwise(estimator):
    """The chunk-wise fit of *estimator*: registered, from an exact merge rule, or ``None``."""
    found = CHUNKWISE.lookup(type(estimator))
    if found is not None:
        return found
    from sklearn.utils import get_tags

    from taskdml.parallel.merge._registry import get_merge_rule

    if not get_tags(estimator).requires_fit:
        return ChunkwiseFit(_fit_chunk, _first, True, "stateless")
    if hasattr(estimator, "partial_fit"):
        rule = get_merge_rule(estimator)
        if rule is not None and rule.exact:
            return ChunkwiseFit(_partial_fit_chunk, _merged, True, rule.family)
    return None


# --------------------------------------------------------------------------------------------
# Built-in chunk-wise fits. Summaries are computed in tasks; combine runs in the client.


def _fit_chunk(estimator, X):
    from sklearn.base import clone

    return clone(estimator).fit(X)


def _first(estimator, summaries, rows):
    return summaries[0]


def _partial_fit_chunk(estimator, X):
    from sklearn.base import clone

    return clone(estimator).partial_fit(X)


def _merged(estimator, summaries, rows):
    from taskdml.parallel.merge._registry import merge_replicas

    return merge_replicas(list(summaries), list(rows))


def _encoder_summary(estimator, X):
    """The categories of each column of one chunk, and the columns' names."""
    infrequent = [
        name
        for name in ("min_frequency", "max_categories")
        if getattr(estimator, name, None) is not None
    ]
    if infrequent:
        raise DataError(
            f"{type(estimator).__name__}({infrequent[0]}=...) needs category counts over all "
            "the data and cannot be fitted chunk by chunk; leave "
            f"{' and '.join(infrequent)} unset."
        )
    fitted = _fit_chunk(estimator, X)
    return {
        "categories": fitted.categories_,
        "names": getattr(fitted, "feature_names_in_", None),
    }


def _padded_columns(columns):
    """Columns of different lengths padded to the longest by repeating their first value."""
    length = max(len(column) for column in columns)
    return [
        np.concatenate([column, np.repeat(column[:1], length - len(column))]) for column in columns
    ]


def _synthetic(columns, names):
    """A frame (with *names*) or a 2-D array holding *columns*."""
    if names is not None:
        import pandas as pd

        return pd.DataFrame(
            {name: pd.Series(column, dtype=column.dtype) for name, column in zip(names, columns)}
        )
    dtype = np.result_type(*[column.dtype for column in columns])
    return np.column_stack([column.astype(dtype) for column in columns])


def _encoder_combine(estimator, summaries, rows):
    """Fit on the union of the chunks' categories: scikit-learn sorts and checks them."""
    from sklearn.base import clone

    n_columns = len(summaries[0]["categories"])
    columns = [
        np.concatenate([summary["categories"][i] for summary in summaries])
        for i in range(n_columns)
    ]
    return clone(estimator).fit(_synthetic(_padded_columns(columns), summaries[0]["names"]))


def _missing(column, missing_values):
    import pandas as pd

    if isinstance(missing_values, float) and np.isnan(missing_values) or missing_values is None:
        return np.asarray(pd.isna(column), dtype=bool)
    return np.asarray(column == missing_values, dtype=bool)


def _imputer_summary(estimator, X):
    """Per column: dtype, and sums and counts (mean) or value counts (most_frequent)."""
    strategy = estimator.strategy
    if strategy not in ("mean", "most_frequent", "constant"):
        raise DataError(
            f"SimpleImputer(strategy={strategy!r}) cannot be fitted chunk by chunk: an exact "
            "median needs every value of a column in one place. Use strategy='mean' or "
            "'most_frequent' (both exact chunk-wise), or impute before chunking."
        )
    if estimator.add_indicator:
        raise DataError(
            "SimpleImputer(add_indicator=True) is not fitted chunk by chunk yet; add a "
            "MissingIndicator step of your own or leave add_indicator=False."
        )
    if strategy == "constant":  # the statistics are the fill value, whatever the data
        return {"fitted": _fit_chunk(estimator, X)}
    names = getattr(X, "columns", None)
    frame_columns = (
        [np.asarray(X[name]) for name in names]
        if names is not None
        else list(np.asarray(X).reshape(len(X), -1).T)
    )
    summary = {"names": None if names is None else list(names), "columns": []}
    for column in frame_columns:
        kept = column[~_missing(column, estimator.missing_values)]
        entry = {"dtype": column.dtype}
        if strategy == "mean":
            entry["sum"], entry["count"] = float(np.sum(kept.astype(np.float64))), kept.size
        elif strategy == "most_frequent":
            entry["counts"] = Counter(kept.tolist())
        summary["columns"].append(entry)
    return summary


def _imputer_combine(estimator, summaries, rows):
    """Fit on one row holding the merged statistics: SimpleImputer keeps it as it is."""
    from sklearn.base import clone

    strategy = estimator.strategy
    if strategy == "constant":
        return summaries[0]["fitted"]
    missing = estimator.missing_values
    columns = []
    for i, entry in enumerate(summaries[0]["columns"]):
        parts = [summary["columns"][i] for summary in summaries]
        value = missing
        if strategy == "mean":
            count = sum(part["count"] for part in parts)
            if count:
                value = sum(part["sum"] for part in parts) / count
        elif strategy == "most_frequent":
            counts = sum((part["counts"] for part in parts), Counter())
            if counts:
                top = max(counts.values())
                value = min(v for v, n in counts.items() if n == top)
        dtype = object if entry["dtype"].kind in "OUS" else np.float64
        columns.append(np.array([value], dtype=dtype))
    return clone(estimator).fit(_synthetic(columns, summaries[0]["names"]))


def _register_builtin():
    from sklearn.impute import SimpleImputer
    from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder

    builtin = {
        OneHotEncoder: (_encoder_summary, _encoder_combine),
        OrdinalEncoder: (_encoder_summary, _encoder_combine),
        SimpleImputer: (_imputer_summary, _imputer_combine),
    }
    for cls, (summarise, combine) in builtin.items():
        CHUNKWISE.register(cls, ChunkwiseFit(summarise, combine, True, cls.__name__))


CHUNKWISE = ClassRegistry()
"""Every transformer class's :class:`ChunkwiseFit`."""
CHUNKWISE.register_lazy(_register_builtin)


# --------------------------------------------------------------------------------------------
# Tasks on chunks


def _select(X, columns):
    from taskdml._compat import _safe_indexing

    return _safe_indexing(X, columns, axis=1)


def _select_columns(columns, X):
    """Task: the *columns* of one chunk, as a ColumnTransformer passes them on."""
    return _select(X, columns)


def _transform(transformer, X):
    return transformer.transform(X)


def _dense(transformer, X):
    """Task: the chunk transformed to a dense float64 block."""
    from scipy import sparse

    result = _call(transformer, "transform", X)
    if sparse.issparse(result):
        result = result.toarray()
    return np.asarray(result, dtype=np.float64)


def _template(column_transformer, X):
    """Task: a ColumnTransformer fitted on one chunk: its column bookkeeping, later filled
    with the transformers fitted on every chunk."""
    from sklearn.base import clone

    return clone(column_transformer).fit(X)


def _assemble(template, fitted, X):
    """Task: *template* with the *fitted* transformers (by name) and their output widths."""
    transformer = copy.copy(template)
    transformer.transformers_ = [
        (name, fitted.get(name, trans), columns) for name, trans, columns in template.transformers_
    ]
    transformer.sparse_output_ = False
    start = 0
    output = {}
    for name, trans, columns in transformer.transformers_:
        if isinstance(trans, str) and trans == "drop":
            continue
        selected = _select(X[:1], columns)
        if np.ndim(selected) == 2 and selected.shape[1] == 0:
            continue
        out = selected if isinstance(trans, str) else trans.transform(selected)
        output[name] = slice(start, start + out.shape[1])
        start += out.shape[1]
    names = [t[0] for t in template.transformers] + ["remainder"]
    transformer.output_indices_ = {name: output.get(name, slice(0, 0)) for name in names}
    return transformer


_UNKNOWN = re.compile(r"Found unknown categories (.*) in column (\d+) during transform")


def _call(model, method, X):
    """``model.<method>(X)``, with an unseen category named by its column."""
    try:
        return getattr(model, method)(X)
    except ValueError as error:
        match = _UNKNOWN.search(str(error))
        if match is None:
            raise
        values, index = match.group(1), int(match.group(2))
        try:  # sorted, so that the message does not depend on the chunk's order
            values = repr(sorted(ast.literal_eval(values), key=str))
        except (ValueError, SyntaxError, TypeError):
            pass
        column = _unknown_column(model, index)
        where = f"column {column!r}" if column is not None else f"column {index}"
        raise DataError(
            f"{where} holds categories {values} that were not seen in training "
            "(handle_unknown='error'). Set handle_unknown='ignore' (encoded as zeros) or "
            "'infrequent_if_exist' on the encoder, or train on data that has them."
        ) from error


def _unknown_column(model, index):
    """The name of input column *index* of the first encoder with handle_unknown='error'."""
    for encoder, names in _encoders(model, None):
        if getattr(encoder, "handle_unknown", None) == "error" and names is not None:
            if index < len(names):
                return str(names[index])
    return None


def _encoders(model, names):
    """(encoder, its input column names) for every encoder inside *model*."""
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline

    if isinstance(model, Pipeline):
        for _, step in model.steps:
            yield from _encoders(step, names)
            try:  # an imputer or a scaler before the encoder keeps the names
                names = step.get_feature_names_out(names)
            except (AttributeError, ValueError, TypeError):
                names = None
    elif isinstance(model, ColumnTransformer):
        for _, trans, columns in getattr(model, "transformers_", []):
            labels = [columns] if isinstance(columns, str) else columns
            if not all(isinstance(label, str) for label in np.atleast_1d(labels)):
                labels = None
            yield from _encoders(trans, labels)
    elif hasattr(model, "categories_"):
        yield model, getattr(model, "feature_names_in_", names)


# --------------------------------------------------------------------------------------------
# Fitting a tree of transformers


class _Chunks:
    """The chunks of one input: delayed objects, and how to compute tasks on them.

    *held* is the persisted collection the parts were taken from: its futures are what keeps
    the chunks on the workers (a delayed object names a key, it does not hold it), so it
    goes wherever the parts go, to every ``map`` of them.
    """

    def __init__(self, parts, rows, client, held=None):
        self.parts, self.rows, self.client, self.held = parts, rows, client, held

    def compute(self, values):
        import dask

        if self.client is not None:
            return self.client.gather(self.client.compute(values))
        return list(dask.compute(*values))

    def map(self, function, *args, phase):
        """``function(*args, chunk)`` on every chunk (:func:`taskdml._apply.map_parts`)."""
        name = _keys.key_name("train", function.__name__, args, self.parts, phase=phase)
        keys = [(name, i) for i in range(len(self.parts))]
        parts = map_parts(function, self.parts, *args, keys=keys)
        return _Chunks(parts, self.rows, self.client, self.held)


def fit_transformers(estimator, chunks, path=()):
    """*estimator* fitted chunk-wise on *chunks* (a :class:`_Chunks`); see the module doc."""
    import dask
    from sklearn.base import clone
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline

    if estimator is None or isinstance(estimator, str):  # "passthrough", "drop"
        return estimator
    where = ".".join(path) or type(estimator).__name__
    if isinstance(estimator, Pipeline):
        steps = []
        for i, (name, step) in enumerate(estimator.steps):
            fitted = fit_transformers(step, chunks, path + (name,))
            steps.append((name, fitted))
            if i < len(estimator.steps) - 1 and not isinstance(fitted, str | None):
                chunks = chunks.map(_transform, fitted, phase="transform")
        pipeline = copy.copy(estimator)  # the given steps replaced by fitted ones
        pipeline.steps = steps
        return pipeline
    if isinstance(estimator, ColumnTransformer):
        template_key = _keys.key_name("train", estimator, chunks.parts[0], phase="template")
        template = chunks.compute(
            [
                dask.delayed(_template, pure=True)(
                    clone(estimator), chunks.parts[0], dask_key_name=template_key
                )
            ]
        )[0]
        fitted = {}
        for name, trans, columns in template.transformers_:
            if (
                isinstance(trans, str)
                or get_chunkwise(trans) is not None
                and (get_chunkwise(trans).family == "stateless")
            ):
                continue
            sub = chunks.map(_select_columns, columns, phase="select")
            fitted[name] = fit_transformers(clone(trans), sub, path + (name,))
        key = _keys.key_name("train", template, fitted, phase="assemble")
        return chunks.compute(
            [
                dask.delayed(_assemble, pure=True)(
                    template, fitted, chunks.parts[0], dask_key_name=key
                )
            ]
        )[0]
    rule = get_chunkwise(estimator)
    if rule is None:
        raise DataError(
            f"{where}: {type(estimator).__name__} cannot be fitted chunk by chunk: it has no "
            "chunk-wise fit (encoders, SimpleImputer, scalers and stateless transformers "
            "have one). Register one with taskdml.parallel.register_chunkwise, or fit it "
            "in memory first."
        )
    if rule.family == "stateless":
        return chunks.compute([dask.delayed(_fit_chunk)(estimator, chunks.parts[0])])[0]
    summaries = chunks.compute(chunks.map(rule.summarise, estimator, phase="summarise").parts)
    return rule.combine(estimator, summaries, chunks.rows)


def fit_chunkwise(transformer, X, *, client=None):
    """Fit a clone of *transformer* chunk by chunk on chunked *X*, where the chunks live.

    Parameters
    ----------
    transformer : scikit-learn transformer, Pipeline or ColumnTransformer
        Every leaf needs a chunk-wise fit (see the module docstring).
    X : dask array, dask DataFrame or xarray.Dataset
        Chunked along samples; a table is read as a dask DataFrame.
    client : distributed.Client or False, optional
        Default: the current client if there is one, else this process.

    Returns
    -------
    estimator
        The fitted clone, equal to a fit on all the data where the chunk-wise fits are exact.

    Raises
    ------
    DataError
        A transformer without a chunk-wise fit, or a configuration that needs all the data
        in one place (``SimpleImputer(strategy="median")``), named with its path.

    Examples
    --------
    >>> import dask.dataframe as dd
    >>> import pandas as pd
    >>> from sklearn.preprocessing import OneHotEncoder
    >>> from taskdml.parallel import fit_chunkwise
    >>> frame = dd.from_pandas(pd.DataFrame({"g": ["b", "a", "c", "a"]}), npartitions=2)
    >>> fit_chunkwise(OneHotEncoder(), frame, client=False).categories_
    [array(['a', 'b', 'c'], dtype=object)]
    """
    from sklearn.base import clone

    from taskdml._data import as_dask, is_chunked

    if not is_chunked(X):
        raise DataError(
            f"fit_chunkwise needs chunked X (a dask array, dask DataFrame or xarray "
            f"Dataset), got {type(X).__name__}; fit in-memory data with fit()."
        )
    client = resolve_client(client)
    X, _, _ = as_dask(X)
    return fit_transformers(clone(transformer), chunks_of(X, client))


def chunks_of(X, client):
    """The row chunks of *X* (a dask array or dask DataFrame) as a :class:`_Chunks`."""
    import dask

    from taskdml._data import is_frame, outside_annotations, partition_lengths

    # Persisted first (on the workers, or in this process without a client): every phase
    # reads the chunks again, and a persisted frame's parts are plain keys to build on.
    if is_frame(X):
        # dask DataFrames are built outside the step's span annotations, which they ignore
        # (and warn about); the tasks on their parts below carry them again.
        def parts():
            frame = client.persist(X) if client is not None else dask.persist(X)[0]
            return list(frame.to_delayed()), frame

        parts, X = outside_annotations(parts)
        return _Chunks(parts, partition_lengths(X, client), client, held=X)
    X = client.persist(X) if client is not None else dask.persist(X)[0]
    return _Chunks(list(X.to_delayed().ravel()), X.chunks[0], client, held=X)


def transformed(transformer, chunks):
    """The chunks transformed by the fitted *transformer*, as a dense float64 dask array."""
    import dask

    blocks = chunks.map(_dense, transformer, phase="transform")
    # Only the width of the first block comes back (the blocks stay where they are made).
    width = chunks.compute([dask.delayed(np.shape)(blocks.parts[0])])[0][1]
    return stacked(blocks.parts, chunks.rows, dtype=np.float64, width=width)


def is_pipeline(estimator):
    """Whether *estimator* is a scikit-learn ``Pipeline``."""
    from sklearn.pipeline import Pipeline

    return isinstance(estimator, Pipeline)


def fitted_prefix(pipeline):
    """The transformers of a fitted pipeline (all steps but the last), or ``None``."""
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(pipeline)
    except Exception:  # NotFittedError, or a pipeline whose last step cannot tell
        return None
    return pipeline[:-1]
