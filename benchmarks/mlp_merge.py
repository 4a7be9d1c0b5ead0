"""MLP replicas on large chunks: the compensated merge, blended beyond 10 local steps, against
the plain average, with ``epochs="auto"``.

100,000 × 20 rows (``make_classification``, 10 informative, ``flip_y=0.05``,
``class_sep=0.8``, seed 0), 25 % held out (stratified), scaled; ``train(MLPClassifier(
random_state=0), ..., strategy="sync", n_replicas=2, sync_every=1, epochs="auto",
client=False)`` on chunks of ``--chunk-rows`` rows, once with the registered rule
(``compensate``) and once with ``register_mlp_merge(MLPClassifier, compensate=False)``
(``average``). Prints, per run: holdout accuracy, epochs, seconds and the first and last
training losses. ``MLPClassifier(random_state=0).fit`` on the same rows: 0.9658 after 188
epochs. Results: ``benchmarks/RESULTS.md``, section "MLP replicas on large chunks".

    python benchmarks/mlp_merge.py compensate 9375 2000
    python benchmarks/mlp_merge.py average 9375 2000
"""

import sys
import time
import warnings

import dask.array as da
from sklearn import datasets
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler

from taskdml.parallel import train
from taskdml.parallel.merge._neural import register_mlp_merge


def main(rule, *chunk_rows):
    warnings.simplefilter("ignore")  # ConvergenceWarning at max_iter, as fit's
    X, y = datasets.make_classification(
        100_000, 20, n_informative=10, flip_y=0.05, class_sep=0.8, random_state=0
    )
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.25, random_state=0, stratify=y
    )
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    register_mlp_merge(MLPClassifier, compensate=rule == "compensate")
    for rows in chunk_rows:
        X_chunked = da.from_array(X_train, chunks=(rows, -1))
        y_chunked = da.from_array(y_train, chunks=rows)
        began = time.perf_counter()
        result = train(
            MLPClassifier(random_state=0), X_chunked, y_chunked, classes=[0, 1],
            strategy="sync", epochs="auto", n_replicas=2, sync_every=1, client=False,
            random_state=0,
        )  # fmt: skip
        losses = [
            round(entry["train_loss"], 3) for entry in result.history if "train_loss" in entry
        ]
        print(
            f"{rule} {rows} rows: accuracy {result.estimator.score(X_test, y_test):.4f}, "
            f"{len(result.history)} epochs, {time.perf_counter() - began:.1f} s, "
            f"loss {losses[:8]} ... {losses[-3:]}",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1], *(int(rows) for rows in sys.argv[2:]))
