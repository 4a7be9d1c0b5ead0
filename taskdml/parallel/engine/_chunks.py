"""One look at every chunk before training: sizes, NaNs, feature counts, labels.

Each chunk is inspected inside its own task (a few numbers and its distinct labels come
back), so a bad chunk is reported by index and row range before any replica starts, and the
classes of a classifier are found without gathering ``y``.
"""

from typing import NamedTuple

import numpy as np

from taskdml.exceptions import DataError


class Chunk(NamedTuple):
    """One row chunk of the training data, as futures, delayed objects or arrays.

    ``y`` and ``weight`` are ``None`` when not given; ``index`` is the chunk's position in
    the data, which decides the replica it belongs to (``index mod R``) and seeds its row
    shuffle.
    """

    X: object
    y: object
    weight: object
    index: int


def inspect_chunk(X, y, weight, want_labels):
    """Small facts about one chunk (a task); a scipy.sparse *X* is inspected as it is."""
    from scipy import sparse

    X = X if sparse.issparse(X) else np.asarray(X)
    facts = {"rows": int(X.shape[0]), "shape": tuple(X.shape)}
    if np.issubdtype(X.dtype, np.floating) or np.issubdtype(X.dtype, np.complexfloating):
        values = X.data if sparse.issparse(X) else X  # a sparse matrix's zeros are finite
        facts["x_nan"] = int(np.count_nonzero(~np.isfinite(values)))
    if y is not None:
        y = np.asarray(y)
        facts["y_rows"] = int(y.shape[0])
        if np.issubdtype(y.dtype, np.floating):
            facts["y_nan"] = int(np.count_nonzero(~np.isfinite(y)))
        if want_labels:
            facts["labels"] = np.unique(y)
    if weight is not None:
        facts["w_rows"] = int(np.asarray(weight).shape[0])
    return facts


def check(facts, n_features, classes=None, is_classifier=False):
    """Raise DataError for the first bad chunk; return the classes (given or found)."""
    first = 0
    found = []
    for index, chunk in enumerate(facts):
        where = f"chunk {index} (rows {first:,}–{first + chunk['rows'] - 1:,})"
        if chunk["rows"] == 0:
            raise DataError(
                f"{where.split(' (')[0]} is empty; drop empty chunks before fitting "
                "(e.g. rechunk the array)."
            )
        if len(chunk["shape"]) != 2 or chunk["shape"][1] != n_features:
            raise DataError(
                f"{where} has shape {chunk['shape']}, expected (rows, {n_features}): "
                "every chunk must have the same features."
            )
        if chunk.get("x_nan"):
            raise DataError(
                f"{where} of X holds {chunk['x_nan']:,} NaN or infinite values; impute or "
                "drop them first (e.g. a SimpleImputer step)."
            )
        if (
            chunk.get("y_rows", chunk["rows"]) != chunk["rows"]
            or chunk.get("w_rows", chunk["rows"]) != chunk["rows"]
        ):
            raise DataError(f"{where}: X, y and sample_weight disagree on the number of rows.")
        if chunk.get("y_nan"):
            raise DataError(
                f"{where} of y holds {chunk['y_nan']:,} NaN or infinite values; drop those rows."
            )
        if "labels" in chunk:
            found.append(chunk["labels"])
            if classes is not None:
                unseen = np.setdiff1d(chunk["labels"], classes)
                if unseen.size:
                    raise DataError(
                        f"{where} of y holds labels {unseen.tolist()} that are not in "
                        f"classes={np.asarray(classes).tolist()}; add them to classes "
                        "or drop those rows."
                    )
        first += chunk["rows"]
    if classes is not None:
        return np.asarray(classes)
    if is_classifier and found:
        return np.unique(np.concatenate(found))
    return None
