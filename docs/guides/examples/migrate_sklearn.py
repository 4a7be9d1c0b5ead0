"""From scikit-learn's n_jobs and joblib's Dask backend to taskdml.

Run it with ``python docs/guides/examples/migrate_sklearn.py``. It starts a two-worker Dask
cluster on 127.0.0.1 and, on it: a grid search (checked against scikit-learn's own, run in
this process), a data-parallel SGDClassifier, and a small pipeline with a ``foreach`` sweep
built in Python. The cluster is closed at the end.
"""

import numpy as np
from distributed import Client, LocalCluster
from sklearn import model_selection as sk_model_selection
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import taskdml
from taskdml import DataParallel, PipelineSpec, Step, run_pipeline


def main():
    X, y = load_digits(return_X_y=True)
    X_train, X_test = X[:1400], X[1400:]
    y_train, y_test = y[:1400], y[1400:]
    pipe = make_pipeline(StandardScaler(), SGDClassifier(random_state=0))
    grid = {"sgdclassifier__alpha": [1e-4, 1e-3, 1e-2], "sgdclassifier__penalty": ["l2", "l1"]}

    # scikit-learn, in this process: the reference the cluster's search must reproduce.
    reference = sk_model_selection.GridSearchCV(pipe, grid, cv=3).fit(X_train, y_train)

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        # 1. The search: same arguments, every candidate x fold a task on the cluster, the
        #    StandardScaler shared by the candidates fitted once per fold.
        search = taskdml.GridSearchCV(pipe, grid, cv=3).fit(X_train, y_train)
        same = np.allclose(
            search.cv_results_["mean_test_score"], reference.cv_results_["mean_test_score"]
        )
        print(
            f"GridSearchCV: best {search.best_params_}, cv accuracy={search.best_score_:.3f}, "
            f"same scores as scikit-learn: {same}"
        )

        # 2. One model trained on every worker at once: replicas merged by model averaging.
        scaler = StandardScaler().fit(X_train)
        model = DataParallel(
            SGDClassifier(alpha=1e-3, random_state=0), epochs=10, sync_every=1, random_state=0
        )
        model.fit(scaler.transform(X_train), y_train)
        accuracy = model.score(scaler.transform(X_test), y_test)
        print(f"DataParallel: {model.stats_['replicas']} replicas, test accuracy={accuracy:.3f}")

        # 3. The same work as a pipeline: a foreach sweep of fits, each item evaluated.
        pipeline = PipelineSpec(
            "digits",
            [
                Step("data", call="taskdml.datasets:load_sklearn", with_={"name": "digits"}),
                Step(
                    "split",
                    call="taskdml.datasets:train_test_split",
                    inputs={"data": "data"},
                    with_={"test_size": 0.25, "random_state": 0},
                    outputs=["train", "test"],
                ),
                Step(
                    "scale",
                    fit="sklearn.preprocessing:StandardScaler",
                    inputs={"data": "split.train"},
                ),
                Step(
                    "sweep",
                    fit="sklearn.linear_model:SGDClassifier",
                    with_={"random_state": 0},
                    foreach={"alpha": [1e-4, 1e-3, 1e-2]},
                    parallel={"epochs": 5, "random_state": 0},
                    inputs={"data": "split.train", "preprocess": "scale"},
                ),
                Step(
                    "report",
                    evaluate=["accuracy"],
                    inputs={"model": "sweep", "data": "split.test", "preprocess": "scale"},
                ),
            ],
        )
        run = run_pipeline(pipeline, client, record=False)
        for item, metrics in sorted(run.metrics["report"].items()):
            print(f"pipeline sweep[{item}]: test accuracy={metrics['accuracy']:.3f}")


if __name__ == "__main__":
    main()
