"""From dask-ml to taskdml: Incremental, HyperbandSearchCV and a search with ASHA.

Run it with ``python docs/guides/examples/migrate_dask_ml.py``. It starts a two-worker
Dask cluster on 127.0.0.1, trains on a chunked dask array and closes the cluster at the end.
"""

import dask.array as da
from distributed import Client, LocalCluster
from scipy.stats import loguniform
from sklearn.datasets import make_classification
from sklearn.linear_model import SGDClassifier

from taskdml import DataParallel
from taskdml.model_selection import ASHASearchCV, HyperbandSearchCV


def main():
    X_all, y_all = make_classification(
        n_samples=12_000, n_features=20, n_informative=8, random_state=0
    )
    # 10,000 training rows in 10 chunks of 1,000, as a dask-ml user's data usually arrives.
    X = da.from_array(X_all[:10_000], chunks=(1_000, 20))
    y = da.from_array(y_all[:10_000], chunks=1_000)
    X_test, y_test = X_all[10_000:], y_all[10_000:]

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        # dask-ml: Incremental(SGDClassifier(...)).fit(X, y, classes=[0, 1]), one epoch,
        # one chunk after another. taskdml: both workers train replicas on the chunks they
        # hold, merged after every chunk (sync_every=1), for five epochs.
        model = DataParallel(
            SGDClassifier(loss="log_loss", alpha=1e-4, random_state=0),
            epochs=5,
            sync_every=1,
            random_state=0,
        )
        model.fit(X, y, classes=[0, 1])
        print(
            f"DataParallel: strategy={model.strategy_} replicas={model.stats_['replicas']} "
            f"epochs={model.n_epochs_} test accuracy={model.score(X_test, y_test):.3f}"
        )

        # dask-ml's HyperbandSearchCV signature runs unchanged; max_iter counts epochs.
        space = {"alpha": loguniform(1e-6, 1e-1), "penalty": ["l2", "l1", "elasticnet"]}
        hyperband = HyperbandSearchCV(
            SGDClassifier(loss="log_loss", random_state=0),
            space,
            max_iter=9,
            aggressiveness=3,
            test_size=0.2,
            random_state=0,
        )
        hyperband.fit(X, y, classes=[0, 1])
        print(
            f"HyperbandSearchCV: {hyperband.metadata_['n_models']} trials, "
            f"best validation score={hyperband.best_score_:.3f}, "
            f"test accuracy={hyperband.score(X_test, y_test):.3f}"
        )

        # ASHA: the same space, no waiting at the rungs.
        asha = ASHASearchCV(
            SGDClassifier(loss="log_loss", random_state=0),
            space,
            n_trials=12,
            max_epochs=9,
            reduction_factor=3,
            random_state=0,
        )
        asha.fit(X, y, classes=[0, 1])
        states = asha.trials_["state"].value_counts().sort_index().to_dict()
        print(
            f"ASHASearchCV: {asha.n_trials_} trials {states}, "
            f"best alpha={asha.best_params_['alpha']:.2g}, "
            f"test accuracy={asha.score(X_test, y_test):.3f}"
        )


if __name__ == "__main__":
    main()
