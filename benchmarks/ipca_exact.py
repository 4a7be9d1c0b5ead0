"""IncrementalPCA trained data-parallel against batch PCA and scikit-learn's serial pass.

Issue 25, item 5: digits in 6 chunks, ``n_components=5``. Prints, for the exact rule (replicas
keep every component, truncated once when handed back), for the rule before it (replicas keep
``n_components``; registered here for a subclass with ``every_component=False``) and for
scikit-learn's serial ``partial_fit`` over the same chunks:

- the largest difference of a component from batch PCA's (``PCA(svd_solver="full")`` on all
  rows; each component's sign aligned first), and from the serial pass's;
- the largest relative difference of ``explained_variance_`` from PCA's;
- the unexplained variance, ``1 - explained_variance_ratio_.sum()``.

The replicas are threads of this process (``client=False``: the arithmetic of a cluster's
replicas, without one). Runs in a few seconds; prints only.

    python benchmarks/ipca_exact.py [--replicas 2] [--epochs 1 5]
"""

import argparse

import dask.array as da
import numpy as np
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA, IncrementalPCA

from taskdml.parallel import register_incremental_pca_merge, train


class TruncatingIncrementalPCA(IncrementalPCA):
    """IncrementalPCA under the rule whose replicas keep n_components (the rule before)."""


register_incremental_pca_merge(TruncatingIncrementalPCA, every_component=False)


def _aligned(components, reference):
    signs = np.sign(np.sum(components * reference, axis=1))
    signs[signs == 0] = 1.0
    return components * signs[:, None]


def _row(name, model, pca, serial):
    ours = _aligned(model.components_, pca.components_)
    vs_serial = np.abs(_aligned(model.components_, serial.components_) - serial.components_)
    variance = np.abs(model.explained_variance_ / pca.explained_variance_ - 1)
    return (
        f"{name:<34} {np.abs(ours - pca.components_).max():>12.2e} {vs_serial.max():>12.2e} "
        f"{variance.max():>12.2e} {1 - model.explained_variance_ratio_.sum():>12.6f}"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--epochs", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--n-components", type=int, default=5)
    args = parser.parse_args(argv)

    X = load_digits().data
    sizes = [len(part) for part in np.array_split(np.arange(len(X)), 6)]
    chunks = da.from_array(X, chunks=(tuple(sizes), X.shape[1]))
    k = args.n_components
    print(f"digits {X.shape}, chunks {sizes}, n_components={k}, replicas={args.replicas}")
    header = ("", "vs PCA", "vs serial", "expl. var.", "unexplained")
    print(f"{header[0]:<34} {header[1]:>12} {header[2]:>12} {header[3]:>12} {header[4]:>12}")
    for epochs in args.epochs:
        rows = np.concatenate([X] * epochs)
        pca = PCA(n_components=k, svd_solver="full").fit(rows)
        serial = IncrementalPCA(n_components=k)
        bounds = np.cumsum([0, *sizes])
        for _ in range(epochs):
            for a, b in zip(bounds[:-1], bounds[1:]):
                serial.partial_fit(X[a:b])
        print(f"-- {epochs} epoch(s)")
        print(_row("PCA (svd_solver='full')", pca, pca, serial))
        print(_row("serial partial_fit", serial, pca, serial))
        for name, estimator in (
            ("taskdml, exact rule", IncrementalPCA(n_components=k)),
            ("taskdml, truncating replicas", TruncatingIncrementalPCA(n_components=k)),
        ):
            model = train(
                estimator,
                chunks,
                epochs=epochs,
                n_replicas=args.replicas,
                sync_every=1,
                shuffle=False,
                client=False,
            ).estimator
            print(_row(name, model, pca, serial))


if __name__ == "__main__":
    main()
