"""The floor of the adaptive-search benchmark: one epoch of SGD in one plain process.

``python benchmarks/sgd_epoch_floor.py`` times ``SGDClassifier(loss="log_loss")`` over the 13
training chunks of ``benchmarks/search.py``'s 300,000-row problem (194,963 rows), as
``partial_fit`` per chunk (what a search's step runs) and as ``fit`` (what
HalvingRandomSearchCV runs), for each penalty. Divide a search's epochs by the cores to get
the least wall time any scheduler could reach.
"""

import time
import warnings

import numpy as np
from sklearn.linear_model import SGDClassifier

from taskdml.datasets import make_classification, train_test_split


def main():
    warnings.simplefilter("ignore")
    data = make_classification(
        300_000, 50, n_informative=20, n_redundant=10, chunk_size=300_000 // 16, random_state=0
    )
    train, _ = train_test_split(data, test_size=0.2, random_state=0)
    X, y = train["X"].data, train["y"].data
    chunks = [(X.blocks[i].compute(), y.blocks[i].compute()) for i in range(13)]
    X_all = np.concatenate([c[0] for c in chunks])
    y_all = np.concatenate([c[1] for c in chunks])
    classes = np.array([0, 1])
    for penalty in ["l2", "l1", "elasticnet"]:
        model = SGDClassifier(loss="log_loss", penalty=penalty, alpha=1e-3)
        model.partial_fit(*chunks[0], classes=classes)
        started = time.perf_counter()
        for _ in range(3):
            for X_chunk, y_chunk in chunks:
                model.partial_fit(X_chunk, y_chunk, classes=classes)
        per_epoch = (time.perf_counter() - started) / 3
        whole = SGDClassifier(loss="log_loss", penalty=penalty, alpha=1e-3, max_iter=3, tol=None)
        started = time.perf_counter()
        whole.fit(X_all, y_all)
        fit_epoch = (time.perf_counter() - started) / 3
        print(
            f"{penalty:10s} {len(y_all):,} rows: partial_fit epoch {per_epoch * 1e3:.0f} ms, "
            f"fit epoch {fit_epoch * 1e3:.0f} ms"
        )


if __name__ == "__main__":
    main()
