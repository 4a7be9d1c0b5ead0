"""GridSearchCV and RandomizedSearchCV on Dask: scikit-learn's results, shared work, chunks."""

import warnings
from collections import Counter, defaultdict

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
from dask.callbacks import Callback
from dask.utils import key_split
from scipy.stats import loguniform
from sklearn import model_selection as sk
from sklearn.datasets import load_digits, load_iris, make_classification
from sklearn.decomposition import PCA
from sklearn.exceptions import FitFailedWarning
from sklearn.linear_model import LogisticRegression, Ridge, SGDClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from sklearn.utils.estimator_checks import parametrize_with_checks

# TODO: import from taskdml once taskdml/__init__.py exports the search classes.
from taskdml.exceptions import DataError
from taskdml.model_selection.grid._search import GridSearchCV, RandomizedSearchCV

STEPS = {"taskdml.search.fits-per-task": "steps"}
"""The dask config that runs a search as one task per pipeline step, fit and scoring."""

DIGITS_GRID = {"pca__n_components": [16, 32], "sgd__alpha": np.logspace(-6, -1, 6)}


def digits_pipeline():
    return Pipeline(
        [
            ("scale", StandardScaler()),
            ("pca", PCA(random_state=0)),
            ("sgd", SGDClassifier(random_state=0)),
        ]
    )


def iris_pipeline():
    return Pipeline(
        [("scale", StandardScaler()), ("pca", PCA()), ("logreg", LogisticRegression(max_iter=500))]
    )


@pytest.fixture(scope="module")
def digits():
    return load_digits(return_X_y=True)


@pytest.fixture(scope="module")
def iris():
    return load_iris(return_X_y=True)


@pytest.fixture(scope="module")
def sklearn_digits(digits):
    """scikit-learn's search of the digits benchmark (12 candidates × 5 folds), run once."""
    return sk.GridSearchCV(digits_pipeline(), DIGITS_GRID, cv=5).fit(*digits)


def assert_same_results(ours, theirs, *, atol=1e-12):
    """Every key of scikit-learn's cv_results_ is ours, with the same values (times aside)."""
    assert sorted(ours.cv_results_) == sorted(theirs.cv_results_)
    for key, expected in theirs.cv_results_.items():
        found = ours.cv_results_[key]
        if key.endswith("_time"):
            assert found.shape == expected.shape and np.all(found >= 0)
        elif key == "params":
            assert found == expected
        elif key.startswith("param_"):
            assert np.array_equal(found.mask, expected.mask) and found.dtype == expected.dtype
            assert list(found.compressed()) == list(expected.compressed())
        elif key.startswith("rank_"):
            assert found.dtype == expected.dtype and np.array_equal(found, expected)
        else:
            np.testing.assert_allclose(found, expected, rtol=0, atol=atol, err_msg=key)
    for name in ("best_index_", "best_params_", "best_score_", "n_splits_", "multimetric_"):
        if hasattr(theirs, name):
            assert getattr(ours, name) == getattr(theirs, name), name


class CountTasks(Callback):
    """Counts the tasks the local scheduler runs, by key prefix, and the graph's data keys."""

    def __init__(self):
        super().__init__()
        self.ran, self.names, self.graph_prefixes = Counter(), defaultdict(set), Counter()

    def _start(self, dsk):
        self.graph_prefixes.update(key_split(key) for key in dsk)

    def _pretask(self, key, dsk, state):
        self.ran[key_split(key)] += 1
        if isinstance(key, tuple):
            self.names[key_split(key)].add(key[0])


def test_digits_grid_equals_scikit_learn_and_shares_the_scaler_on_the_cluster(
    client, digits, sklearn_digits
):
    """Digits on two workers, a task per step: scikit-learn's cv_results_, and each prefix
    fitted once per fold."""
    from distributed import get_task_stream

    with get_task_stream(client) as stream, dask.config.set(STEPS):
        search = GridSearchCV(digits_pipeline(), DIGITS_GRID, cv=5).fit(*digits)
    assert_same_results(search, sklearn_digits)
    ran = Counter(key_split(task["key"]) for task in stream.data)
    # 5 scaler fits (one per fold) + 10 PCA fits (one per fold and n_components), not 60 + 60.
    assert ran["search-transform"] == 15
    assert ran["search-split"] == 5 and ran["search-fit"] == 60 and ran["search-score"] == 60
    assert ran["search-refit"] == 1
    names = defaultdict(set)
    for task in stream.data:
        if key_split(task["key"]) == "search-transform":
            names[task["key"][0]].add(task["key"][1])
    assert sorted(map(sorted, names.values())) == [[0, 1, 2, 3, 4]] * 3
    np.testing.assert_array_equal(search.predict(digits[0]), sklearn_digits.predict(digits[0]))
    np.testing.assert_array_equal(search.classes_, sklearn_digits.classes_)
    assert search.score(*digits) == sklearn_digits.score(*digits)


def test_local_scheduler_puts_the_data_in_once_and_runs_identical_work_once(iris):
    """Without a client, a task per step: one data key, the scaler once per fold, duplicate
    candidates once."""
    grid = {"pca__n_components": [2, 3], "logreg__C": [0.5, 1.0, 1.0]}
    counter = CountTasks()
    with counter, dask.config.set(STEPS):
        search = GridSearchCV(iris_pipeline(), grid, cv=4, refit=False).fit(*iris)
    assert counter.graph_prefixes["search-data"] == 1
    assert counter.ran["search-transform"] == 4 + 2 * 4
    assert counter.ran["search-fit"] == 4 * 4 and counter.ran["search-score"] == 4 * 4
    assert len(counter.names["search-transform"]) == 3
    assert_same_results(
        search, sk.GridSearchCV(iris_pipeline(), grid, cv=4, refit=False).fit(*iris)
    )
    assert not hasattr(search, "best_estimator_")


@pytest.mark.parametrize("use_client", [False, True], ids=["threads", "cluster"])
def test_randomized_search_equals_scikit_learn(request, iris, use_client):
    """Same sampled candidates, split/mean/std scores, ranks and masks as scikit-learn."""
    if use_client:
        request.getfixturevalue("client")
    space = [
        {"logreg__C": loguniform(1e-2, 1e2), "pca__n_components": [2, 3, 4]},
        {"logreg__C": [1.0], "pca": ["passthrough"]},
    ]
    options = dict(n_iter=12, cv=5, random_state=0, return_train_score=True)
    ours = RandomizedSearchCV(iris_pipeline(), space, **options).fit(*iris)
    theirs = sk.RandomizedSearchCV(iris_pipeline(), space, **options).fit(*iris)
    assert_same_results(ours, theirs)
    assert ours.cv_results_["param_pca"].mask.sum() == 12 - sum(
        p.get("pca") == "passthrough" for p in theirs.cv_results_["params"]
    )
    np.testing.assert_allclose(
        ours.predict_proba(iris[0]), theirs.predict_proba(iris[0]), atol=1e-12
    )


@pytest.mark.parametrize("refit", ["f1_macro", False, "callable"])
def test_multimetric_scoring_with_refit(iris, refit):
    """Several metrics: scikit-learn's columns, the refit metric's best index, the scorers."""
    if refit == "callable":
        refit = lambda results: int(np.argmin(results["mean_test_accuracy"]))  # noqa: E731
    options = dict(
        scoring={"accuracy": "accuracy", "f1_macro": "f1_macro", "nll": "neg_log_loss"},
        refit=refit,
        cv=3,
        return_train_score=True,
    )
    grid = {"logreg__C": [0.01, 0.1, 1.0]}
    ours = GridSearchCV(iris_pipeline(), grid, **options).fit(*iris)
    theirs = sk.GridSearchCV(iris_pipeline(), grid, **options).fit(*iris)
    assert_same_results(ours, theirs)
    assert ours.multimetric_ and sorted(ours.scorer_) == ["accuracy", "f1_macro", "nll"]
    if isinstance(refit, str):
        assert ours.score(*iris) == theirs.score(*iris)
    if refit:
        np.testing.assert_array_equal(ours.predict(iris[0]), theirs.predict(iris[0]))
        assert ours.refit_time_ >= 0
    else:
        with pytest.raises(AttributeError, match="has no attribute .predict."):
            ours.predict(iris[0])


def test_multimetric_needs_a_refit_metric(iris):
    """refit=True with several metrics is refused with scikit-learn's message."""
    options = dict(scoring=["accuracy", "f1_macro"])
    with pytest.raises(ValueError, match="the parameter refit must be set to a scorer key") as ours:
        GridSearchCV(iris_pipeline(), {"logreg__C": [1.0]}, **options).fit(*iris)
    with pytest.raises(ValueError) as theirs:
        sk.GridSearchCV(iris_pipeline(), {"logreg__C": [1.0]}, **options).fit(*iris)
    assert str(ours.value) == str(theirs.value)


def test_callable_scorer_sees_the_fitted_pipeline(iris):
    """A callable scorer gets the whole fitted pipeline and the raw rows, as in scikit-learn."""

    def explained(estimator, X, y):
        return estimator.named_steps["pca"].explained_variance_ratio_.sum() + estimator.score(X, y)

    grid = {"pca__n_components": [2, 3], "logreg__C": [0.1, 1.0]}
    ours = GridSearchCV(iris_pipeline(), grid, scoring=explained, cv=3).fit(*iris)
    assert_same_results(
        ours, sk.GridSearchCV(iris_pipeline(), grid, scoring=explained, cv=3).fit(*iris)
    )


def test_fit_params_and_groups_are_split_with_the_rows(iris):
    """Per-sample fit parameters follow the folds; groups go to the splitter."""
    X, y = iris
    weights = np.random.default_rng(0).uniform(0.5, 2.0, size=len(y))
    groups = np.arange(len(y)) % 5
    fit = dict(logreg__sample_weight=weights, groups=groups)
    grid = {"logreg__C": [0.1, 1.0]}
    ours = GridSearchCV(iris_pipeline(), grid, cv=sk.GroupKFold(3)).fit(X, y, **fit)
    assert_same_results(
        ours, sk.GridSearchCV(iris_pipeline(), grid, cv=sk.GroupKFold(3)).fit(X, y, **fit)
    )


@pytest.mark.parametrize("use_client", [False, True], ids=["threads", "cluster"])
def test_failing_candidates_score_error_score(request, iris, use_client):
    """A failing shared step fails its candidates: FitFailedWarning, error_score, rest kept."""
    if use_client:
        request.getfixturevalue("client")
    grid = {"pca__n_components": [2, 10], "logreg__C": [0.1, 1.0]}
    with pytest.warns(FitFailedWarning, match=r"10 fits failed out of a total of 20"):
        ours = GridSearchCV(iris_pipeline(), grid, cv=5, error_score=-1.0).fit(*iris)
    with pytest.warns(FitFailedWarning):
        theirs = sk.GridSearchCV(iris_pipeline(), grid, cv=5, error_score=-1.0).fit(*iris)
    assert_same_results(ours, theirs)
    failed = ours.cv_results_["param_pca__n_components"] == 10
    assert np.all(ours.cv_results_["mean_test_score"][failed] == -1.0)


@pytest.mark.parametrize(
    "grid, error_score, error, message",
    [
        ({"pca__n_components": [2, 10]}, "raise", ValueError, "n_components=10 must be between"),
        ({"pca__n_components": [10, 20]}, np.nan, ValueError, "All the 10 fits failed"),
        ({"logreg__nonsense": [1]}, np.nan, ValueError, "Invalid parameter 'nonsense'"),
    ],
    ids=["raise", "all-fail", "bad-parameter"],
)
def test_search_errors(iris, grid, error_score, error, message):
    """error_score='raise', all fits failing and an unknown parameter raise as in scikit-learn."""
    search = GridSearchCV(iris_pipeline(), grid, cv=5, error_score=error_score)
    with pytest.raises(error, match=message) as ours, warnings.catch_warnings():
        warnings.simplefilter("ignore", FitFailedWarning)
        search.fit(*iris)
    with pytest.raises(error) as theirs, warnings.catch_warnings():
        warnings.simplefilter("ignore", FitFailedWarning)
        sk.GridSearchCV(iris_pipeline(), grid, cv=5, error_score=error_score).fit(*iris)
    assert str(ours.value).splitlines()[0] == str(theirs.value).splitlines()[0]


@pytest.mark.filterwarnings("ignore:One or more of the test scores are non-finite")
def test_scoring_that_fails_scores_error_score(iris):
    """A scorer that raises gives error_score for that fit, with scikit-learn's warning."""

    def fragile(estimator, X, y):
        if estimator.named_steps["logreg"].C > 0.5:
            raise RuntimeError("cannot score")
        return estimator.score(X, y)

    with pytest.warns(UserWarning, match="Scoring failed"):
        search = GridSearchCV(
            iris_pipeline(), {"logreg__C": [0.1, 1.0]}, scoring=fragile, cv=3
        ).fit(*iris)
    assert np.isnan(search.cv_results_["mean_test_score"][1]) and search.best_index_ == 0
    with pytest.warns(UserWarning, match="Scoring failed"):
        theirs = sk.GridSearchCV(
            iris_pipeline(), {"logreg__C": [0.1, 1.0]}, scoring=fragile, cv=3
        ).fit(*iris)
    assert_same_results(search, theirs)


def scaled_pca(n_components):
    return Pipeline([("s", StandardScaler()), ("p", PCA(n_components))])


@pytest.mark.parametrize(
    "first, second, same",
    [
        (PCA(n_components=2), PCA(n_components=2), True),
        (PCA(n_components=2), PCA(n_components=3), False),
        (scaled_pca(2), scaled_pca(2), True),
        (scaled_pca(2), scaled_pca(3), False),
        (StandardScaler().fit([[0.0], [1.0]]), StandardScaler().fit([[0.0], [2.0]]), False),
        (StandardScaler().fit([[0.0], [1.0]]), StandardScaler().fit([[0.0], [1.0]]), True),
    ],
    ids=[
        "equal",
        "params-differ",
        "nested-equal",
        "nested-differ",
        "fitted-differ",
        "fitted-equal",
    ],
)
def test_step_tokens_compare_parameters_and_fitted_state(first, second, same):
    """Steps share work when their parameters (and, if already fitted, their state) are equal."""
    from dask.base import tokenize

    from taskdml.model_selection.grid._graph import estimator_spec

    assert (tokenize(estimator_spec(first)) == tokenize(estimator_spec(second))) is same


# --------------------------------------------------------------------------------------------
# Chunked data: folds of whole chunks, trained by the engine, scored by taskdml.metrics.


@pytest.fixture(scope="module")
def chunked():
    X, y = make_classification(n_samples=1200, n_features=8, n_informative=5, random_state=0)
    return da.from_array(X, chunks=(120, 8)), da.from_array(y, chunks=120), X, y


def serial_fit(estimator, X, y, chunks):
    """The reference training: partial_fit on each chunk of *chunks* in order, in this process."""
    from sklearn.base import clone

    model = clone(estimator)
    with dask.config.set(scheduler="sync"):  # in this process, even with a default client
        for i in chunks:
            model.partial_fit(
                X.blocks[int(i)].compute(),
                y.blocks[int(i)].compute(),
                classes=np.unique(y.compute()),
            )
    return model


def reference_scores(estimator, grid, X, y, n_folds):
    """Each candidate trained by a serial partial_fit loop on its training chunks and scored
    by scikit-learn on the rest and on its training rows: (test, train) scores."""
    n_chunks = X.numblocks[0]
    scores = []
    for params in sk.ParameterGrid(grid):
        row = []
        for train_chunks, test_chunks in sk.KFold(n_folds).split(np.zeros((n_chunks, 1))):
            model = serial_fit(estimator.set_params(**params), X, y, train_chunks)
            with dask.config.set(scheduler="sync"):  # in this process, even with a client
                row.append(
                    [
                        model.score(
                            da.concatenate([X.blocks[int(i)] for i in chunks]).compute(),
                            da.concatenate([y.blocks[int(i)] for i in chunks]).compute(),
                        )
                        for chunks in (test_chunks, train_chunks)
                    ]
                )
        scores.append(row)
    scores = np.array(scores)
    return scores[..., 0], scores[..., 1]


@pytest.mark.parametrize("use_client", [False, True], ids=["threads", "cluster"])
def test_chunked_search_trains_with_the_engine_on_chunk_folds(request, chunked, use_client):
    """Dask-array folds are chunks; each candidate's test and train scores are those of the
    serial partial_fit loop on its training chunks; the refit is that loop on every chunk."""
    if use_client:
        request.getfixturevalue("client")
    X, y, X_np, y_np = chunked
    grid = {"alpha": [1e-4, 1e-2, 1.0]}
    given = {} if use_client else {"classes": np.unique(y_np)}  # else found chunk-wise
    search = GridSearchCV(
        SGDClassifier(random_state=0),
        grid,
        cv=5,
        return_train_score=True,
        strategy="sequential",
        epochs=1,
    )
    search.fit(X, y, **given)
    expected, expected_train = reference_scores(SGDClassifier(random_state=0), grid, X, y, 5)
    for fold in range(5):
        np.testing.assert_allclose(
            search.cv_results_[f"split{fold}_test_score"], expected[:, fold], atol=1e-12
        )
        np.testing.assert_allclose(
            search.cv_results_[f"split{fold}_train_score"], expected_train[:, fold], atol=1e-12
        )
    assert search.best_index_ == int(np.argmax(expected.mean(axis=1)))
    assert search.n_splits_ == 5
    assert search.best_estimator_.alpha == grid["alpha"][search.best_index_]
    best = SGDClassifier(random_state=0, alpha=search.best_estimator_.alpha)
    refit = serial_fit(best, X, y, range(X.numblocks[0]))
    np.testing.assert_array_equal(search.best_estimator_.coef_, refit.coef_)
    assert search.score(X, y) == pytest.approx(refit.score(X_np, y_np), abs=1e-12)
    assert search.predict(X_np[:10]).shape == (10,)


def test_chunked_search_defaults_fit_each_candidate_as_scikit_learn_does(client, chunked):
    """Defaults (epochs "auto", the strategy chosen): small folds are fitted at once, so every
    candidate's score is scikit-learn's fit on its training chunks, and the refit is fit on
    every row, trained as far as fit trains (not one epoch)."""
    X, y, X_np, y_np = chunked
    grid = {"alpha": [1e-4, 1e-2]}
    search = GridSearchCV(SGDClassifier(random_state=0), grid, cv=3).fit(X, y)
    bounds = np.cumsum((0, *X.chunks[0]))
    for c, params in enumerate(sk.ParameterGrid(grid)):
        for fold, (train, test) in enumerate(sk.KFold(3).split(np.zeros((X.numblocks[0], 1)))):
            rows = [np.arange(bounds[i], bounds[i + 1]) for i in train]
            held = [np.arange(bounds[i], bounds[i + 1]) for i in test]
            train_rows, test_rows = np.concatenate(rows), np.concatenate(held)
            model = SGDClassifier(random_state=0, **params).fit(X_np[train_rows], y_np[train_rows])
            expected = model.score(X_np[test_rows], y_np[test_rows])
            assert search.cv_results_[f"split{fold}_test_score"][c] == pytest.approx(expected)
    best = SGDClassifier(random_state=0, **search.best_params_).fit(X_np, y_np)
    np.testing.assert_array_equal(search.best_estimator_.coef_, best.coef_)
    assert best.n_iter_ > 1


def test_chunked_dataset_with_several_metrics_and_a_whole_fit(chunked):
    """An xarray Dataset, named metrics, an estimator without partial_fit fitted once per fold."""
    X, y, X_np, y_np = chunked
    data = xr.Dataset({"X": (("sample", "feature"), X), "y": ("sample", y)})
    search = GridSearchCV(
        LogisticRegression(),
        {"C": [0.01, 1.0]},
        cv=3,
        refit="f1_macro",
        scoring=["accuracy", "f1_macro"],
    ).fit(data)
    for index, C in enumerate([0.01, 1.0]):
        for fold, (train_chunks, _test_chunks) in enumerate(sk.KFold(3).split(np.zeros((10, 1)))):
            train_rows = np.concatenate([np.arange(120 * c, 120 * c + 120) for c in train_chunks])
            test_rows = np.setdiff1d(np.arange(1200), train_rows)
            model = LogisticRegression(C=C).fit(X_np[train_rows], y_np[train_rows])
            assert search.cv_results_[f"split{fold}_test_accuracy"][index] == pytest.approx(
                model.score(X_np[test_rows], y_np[test_rows]), abs=1e-12
            )
    assert (
        search.multimetric_
        and search.best_params_ == search.cv_results_["params"][search.best_index_]
    )


@pytest.mark.parametrize(
    "options, data, message",
    [
        (dict(cv=5), "few-chunks", "5 folds need at least 5 chunks"),
        (
            dict(scoring=lambda est, X, y: 0.0),
            "chunked",
            "callables need the predictions in one place",
        ),
        (dict(scoring="acuracy"), "chunked", "Did you mean 'accuracy'"),
        (
            dict(strategy="synk"),
            "chunked",
            "GridSearchCV: strategy must be one of 'sync', 'async', 'sequential'; got 'synk'. "
            "Did you mean 'sync'?",
        ),
    ],
    ids=["few-chunks", "callable-scoring", "unknown-metric", "bad-strategy"],
)
def test_chunked_search_errors(chunked, options, data, message):
    """Mistakes on chunked data are refused before anything trains, with the fix."""
    X, y = chunked[:2]
    if data == "few-chunks":
        X, y = X.rechunk((600, 8)), y.rechunk(600)
    with pytest.raises((DataError, ValueError), match=message):
        GridSearchCV(SGDClassifier(), {"alpha": [1e-4]}, **options).fit(X, y)


# --------------------------------------------------------------------------------------------
# The scikit-learn estimator contract.


def expected_failed_checks(estimator):
    """The checks scikit-learn's own searches fail too, for the same reason."""
    if isinstance(estimator.estimator, Ridge):
        # Ridge takes a 2-D y without a DataConversionWarning, but the search's tags (as
        # scikit-learn's) do not claim multi-output, so the check expects the warning.
        return {
            "check_supervised_y_2d": "DataConversionWarning not raised (as scikit-learn's searches)"
        }
    return {}


@parametrize_with_checks(
    [
        GridSearchCV(
            Pipeline([("pca", PCA()), ("logisticregression", LogisticRegression())]),
            {"logisticregression__C": [0.1, 1.0]},
            cv=2,
            error_score="raise",
        ),
        RandomizedSearchCV(
            Ridge(), {"alpha": [0.1, 1.0]}, n_iter=2, cv=2, error_score="raise", random_state=0
        ),
    ],
    expected_failed_checks=expected_failed_checks,
)
def test_scikit_learn_estimator_checks(estimator, check):
    """scikit-learn's estimator checks pass, bar the one scikit-learn's searches also fail."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        check(estimator)


def test_clone_and_params_round_trip():
    """The estimator contract: __init__ stores, clone copies, bad grid values raise as sklearn."""
    from sklearn.base import clone

    search = GridSearchCV(SVC(), {"C": [1]}, strategy="sync", sync_every=2)
    assert clone(search).get_params()["strategy"] == "sync"
    assert search.set_params(sync_every=4).get_params()["sync_every"] == 4
    message = "Parameter grid for parameter 'C' needs to be a list"
    with pytest.raises(TypeError, match=message) as ours:
        GridSearchCV(SVC(), {"C": 1}).fit(*load_iris(return_X_y=True))
    with pytest.raises(TypeError) as theirs:
        sk.GridSearchCV(SVC(), {"C": 1}).fit(*load_iris(return_X_y=True))
    assert str(ours.value) == str(theirs.value)
    assert dask.config.get("scheduler", None) is None


def _hinge(model, X, y):
    """The hinge loss of a binary linear model, summed over rows, from its definition."""
    signs = np.where(y == model.classes_[1], 1.0, -1.0)
    return float(np.maximum(0.0, 1.0 - model.decision_function(X) * signs).sum())


def test_the_parallel_dict_is_deprecated_and_still_read(chunked):
    """GridSearchCV(parallel={...}), the way before 0.2: a FutureWarning, the dict's options
    used (a misspelt key still named), and the same search as with the parameters: each
    score and the refit are reference_loops.py's sync loop (2 replicas, sync_every 1, in chunk
    order) stopping by SGDClassifier's rule on the hinge loss, on the fold's chunks."""
    from reference_loops import chunks_of, merge_linear_sgd, reference_sync_until

    X, y, X_np, y_np = chunked
    old = GridSearchCV(SGDClassifier(random_state=0), {"alpha": [1e-4, 1e-2]}, cv=2,
                       parallel={"strategy": "sync", "n_replicas": 2, "sync_every": 1})  # fmt: skip
    with pytest.warns(FutureWarning, match=r"GridSearchCV\(parallel=...\) is deprecated"):
        old.fit(X, y)
    new = GridSearchCV(SGDClassifier(random_state=0), {"alpha": [1e-4, 1e-2]}, cv=2,
                       strategy="sync", n_replicas=2, sync_every=1).fit(X, y)  # fmt: skip
    np.testing.assert_array_equal(
        old.cv_results_["mean_test_score"], new.cv_results_["mean_test_score"]
    )
    with pytest.warns(FutureWarning), pytest.raises(ValueError, match="Did you mean 'strategy'"):
        GridSearchCV(SGDClassifier(), {"alpha": [1e-4]}, parallel={"stratgy": "sync"}).fit(X, y)
    chunks, classes = chunks_of(X_np, y_np, X.chunks[0]), np.unique(y_np)

    def sync_until(params, chunks):  # SGDClassifier's defaults: max_iter 1000, tol, patience 5
        return reference_sync_until(
            SGDClassifier(random_state=0, **params), chunks, classes, merge_linear_sgd, _hinge,
            n_replicas=2, sync_every=1, max_epochs=1000, tol=1e-3, patience=5,
        )[0]  # fmt: skip

    for c, params in enumerate(sk.ParameterGrid({"alpha": [1e-4, 1e-2]})):
        for fold, (train, test) in enumerate(sk.KFold(2).split(np.zeros((X.numblocks[0], 1)))):
            model = sync_until(params, [chunks[i] for i in train])
            X_test = np.concatenate([chunks[i][0] for i in test])
            y_test = np.concatenate([chunks[i][1] for i in test])
            expected = model.score(X_test, y_test)
            assert new.cv_results_[f"split{fold}_test_score"][c] == pytest.approx(expected)
    refit = sync_until(new.best_params_, chunks)
    np.testing.assert_allclose(new.best_estimator_.coef_, refit.coef_, rtol=1e-10)


def test_searches_back_to_back_on_one_cluster(client):
    """A search started right after another on the same data gets keys of its own: each gives
    scikit-learn's best_score_."""
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    from taskdml import GridSearchCV as TaskdmlGrid

    X, y = load_iris(return_X_y=True)
    scores = [
        TaskdmlGrid(LogisticRegression(max_iter=300), {"C": [0.1, 1.0]}, cv=3).fit(X, y).best_score_
        for _ in range(4)
    ]
    expected = sk.GridSearchCV(LogisticRegression(max_iter=300), {"C": [0.1, 1.0]}, cv=3).fit(X, y)
    assert scores == [expected.best_score_] * 4


def test_precomputed_kernel_as_a_list_is_refused():
    """A precomputed kernel given as a list is refused before any fit, saying how to fix it."""
    kernel, y = np.eye(6).tolist(), [0, 1] * 3
    with pytest.raises(ValueError, match=r"sparse matrices, got a list; convert X with numpy"):
        GridSearchCV(SVC(kernel="precomputed"), {"C": [1]}, cv=2).fit(kernel, y)


@pytest.mark.parametrize("use_client", [False, True], ids=["threads", "cluster"])
def test_metadata_routing_gives_scikit_learns_results(request, iris, use_client):
    """With metadata routing on, requested metadata reaches fit and scorer as in scikit-learn."""
    from sklearn import config_context
    from sklearn.metrics import accuracy_score, make_scorer

    if use_client:
        request.getfixturevalue("client")
    X, y = iris
    weights = np.random.RandomState(0).randint(1, 5, len(y))
    with config_context(enable_metadata_routing=True):
        estimator = LogisticRegression(max_iter=500).set_fit_request(sample_weight=True)
        scoring = make_scorer(accuracy_score).set_score_request(sample_weight=True)
        ours = GridSearchCV(estimator, {"C": [0.01, 1]}, cv=3, scoring=scoring)
        theirs = sk.GridSearchCV(estimator, {"C": [0.01, 1]}, cv=3, scoring=scoring)
        ours.fit(X, y, sample_weight=weights)
        theirs.fit(X, y, sample_weight=weights)
        score = ours.score(X, y, sample_weight=weights)
        expected = theirs.score(X, y, sample_weight=weights)
    assert_same_results(ours, theirs)
    assert score == expected


def test_routed_metadata_reaches_every_scorer_split_with_the_test_rows(iris):
    """Routed metadata reaches each scorer of a multi-metric search, cut to the fold's rows."""
    from sklearn import config_context
    from sklearn.tests.metadata_routing_common import ConsumingScorer, _Registry

    X, y = iris
    weights = np.random.RandomState(0).rand(len(y))
    registry = _Registry()
    with config_context(enable_metadata_routing=True):
        scorer = ConsumingScorer(registry=registry).set_score_request(sample_weight="score_weights")
        search = GridSearchCV(
            LogisticRegression(max_iter=500),
            {"C": [1]},
            cv=3,
            scoring={"consuming": scorer, "accuracy": "accuracy"},
            refit="accuracy",
        ).fit(X, y, score_weights=weights)
    records = [
        record
        for consumer in {id(consumer): consumer for consumer in registry}.values()
        for by_caller in consumer._records.values()
        for calls in by_caller.values()
        for record in calls
    ]
    assert len(records) == 3
    for record in records:
        assert len(record["sample_weight"]) == len(y) // 3
        assert np.isin(record["sample_weight"], weights).all()
    # each scorer got exactly one fold's test rows' weights, every fold once
    folds = [weights[test] for _, test in sk.StratifiedKFold(3).split(X, y)]
    seen = sorted(
        next(i for i, fold in enumerate(folds) if np.array_equal(record["sample_weight"], fold))
        for record in records
    )
    assert seen == [0, 1, 2]
    # and the other metric is scikit-learn's accuracy of the model on each fold
    expected = sk.cross_val_score(LogisticRegression(max_iter=500), X, y, cv=3)
    for fold in range(3):
        assert search.cv_results_[f"split{fold}_test_accuracy"][0] == pytest.approx(
            expected[fold], abs=1e-12
        )


# --------------------------------------------------------------------------------------------
# Work units: small fits batched into tasks sized by the first fits' measured time.


def split_scores(search):
    return {key: value for key, value in search.cv_results_.items() if key.startswith("split")}


@pytest.mark.parametrize("use_client", [False, True], ids=["threads", "cluster"])
@pytest.mark.parametrize("fits_per_task", ["auto", 1, 5])
def test_batches_give_the_results_of_one_task_per_step(request, iris, use_client, fits_per_task):
    """Batched fits give bit for bit the scores of the one-task-per-step graph, and
    scikit-learn's cv_results_ and best_params_."""
    if use_client:
        request.getfixturevalue("client")
    grid = {"pca__n_components": [2, 3], "logreg__C": [0.1, 1.0, 1.0]}
    options = dict(cv=4, return_train_score=True)
    with dask.config.set(STEPS):
        steps = GridSearchCV(iris_pipeline(), grid, **options).fit(*iris)
    with dask.config.set({"taskdml.search.fits-per-task": fits_per_task}):
        batched = GridSearchCV(iris_pipeline(), grid, **options).fit(*iris)
    for key, expected in split_scores(steps).items():
        np.testing.assert_array_equal(batched.cv_results_[key], expected, err_msg=key)
    assert batched.best_params_ == steps.best_params_
    assert_same_results(batched, sk.GridSearchCV(iris_pipeline(), grid, **options).fit(*iris))
    assert np.all(batched.cv_results_["mean_fit_time"] > 0)
    schedule = batched._schedule
    assert schedule["fits"] == 24 and schedule["setting"] == fits_per_task
    if fits_per_task != "auto":
        assert schedule["fits_per_task"] == fits_per_task and schedule["probed"] == 0


@pytest.mark.parametrize(
    "target, size", [(1e-9, 1), (0.1, None), (1e9, 11)], ids=["one-fit", "default", "huge"]
)
def test_batch_size_follows_the_measured_fit_time(client, iris, target, size):
    """A first fit per worker is timed; the batch size is the target over that time (capped so
    every worker gets a batch); each batch is one task named by its fold and candidates."""
    from distributed import get_task_stream

    from taskdml.model_selection.grid._graph import fits_per_task

    grid = {"pca__n_components": [2, 3], "logreg__C": [0.01, 0.1, 1.0]}
    with get_task_stream(client) as stream:
        with dask.config.set({"taskdml.search.task-seconds": target}):
            search = GridSearchCV(iris_pipeline(), grid, cv=4).fit(*iris)
    schedule = search._schedule
    assert schedule["probed"] == 2 and isinstance(schedule["seconds_per_fit"], float)
    expected = fits_per_task(schedule["seconds_per_fit"], target, 24 - 2, 2)
    assert schedule["fits_per_task"] == expected == (size or expected)
    keys = defaultdict(list)
    for task in stream.data:
        keys[key_split(task["key"])].append(task["key"])
    assert len(keys["search-probe"]) == 2 and not keys["search-fit"]
    assert len(keys["search-batch"]) == schedule["tasks"] - 2
    covered = Counter()
    for _, fold, first, stop in keys["search-probe"] + keys["search-batch"]:
        assert 1 <= stop - first <= expected
        covered.update((candidate, fold) for candidate in range(first, stop))
    assert sorted(covered) == [(c, f) for c in range(6) for f in range(4)]
    assert set(covered.values()) == {1}
    # batched as they are, the scores are scikit-learn's search's
    reference = sk.GridSearchCV(iris_pipeline(), grid, cv=4).fit(*iris)
    for fold in range(4):
        key = f"split{fold}_test_score"
        np.testing.assert_allclose(search.cv_results_[key], reference.cv_results_[key], atol=1e-12)
    assert search.best_params_ == reference.best_params_


@pytest.mark.parametrize(
    "seconds, n_fits, n_threads, expected",
    [
        (0.005, 46, 2, 20),  # 100 ms of 5 ms fits
        (0.04, 58, 2, 2),  # 80 ms, rounded
        (0.074, 58, 2, 1),  # one fit is most of the target already
        (2.0, 58, 2, 1),
        (0.001, 10, 4, 3),  # 100 fits would fit, but four threads want a batch each
        (0.0, 10, 1, 10),
    ],
)
def test_fits_per_task(seconds, n_fits, n_threads, expected):
    """The batch size: target over the measured time, rounded, at least one, a batch per thread."""
    import math

    from taskdml.model_selection.grid._graph import fits_per_task

    target = 0.1
    by_time = math.inf if seconds == 0 else round(target / seconds)
    rule = max(1, min(by_time, math.ceil(n_fits / n_threads)))  # the docstring's rule
    assert fits_per_task(seconds, target, n_fits, n_threads) == expected == rule


def test_batches_are_runs_of_candidates_on_one_fold():
    """Batches never cross a fold or a probed fit, and are evenly sized within a run."""
    from taskdml.model_selection.grid._graph import group

    order = [(c, f) for f in range(2) for c in range(7) if (c, f) not in {(0, 0), (3, 1)}]
    assert group(order, 4) == [
        [(1, 0), (2, 0), (3, 0)],
        [(4, 0), (5, 0), (6, 0)],
        [(0, 1), (1, 1), (2, 1)],
        [(4, 1), (5, 1), (6, 1)],
    ]


@pytest.mark.parametrize("setting", [0, "fast", True])
def test_fits_per_task_config_is_checked(iris, setting):
    """A fits-per-task that is not 'auto', 'steps' or a positive int is refused with the fix."""
    with dask.config.set({"taskdml.search.fits-per-task": setting}):
        with pytest.raises(ValueError, match="must be 'auto', 'steps' or an int >= 1, got"):
            GridSearchCV(iris_pipeline(), {"logreg__C": [1.0]}, cv=2).fit(*iris)


def constant_score(estimator, X, y):
    """A scorer for estimators without predict; importable, so callbacks can send it back."""
    return 0.5


@pytest.mark.parametrize("fits_per_task", ["steps", "auto"])
def test_callbacks_propagate_into_fits_on_worker_processes(client, fits_per_task):
    """scikit-learn's callbacks on a real cluster: the hooks of every evaluation and of the
    refit are called in the worker processes' tasks and reach this process, and auto-propagated
    callbacks also get every inner fit's (scikit-learn's own counts, as in its test_search)."""
    from sklearn.callback.tests._utils import (
        MaxIterEstimator,
        RecordingAutoPropagatedCallback,
        RecordingCallback,
    )

    X, y = make_classification(random_state=0)
    callbacks = [RecordingCallback(), RecordingAutoPropagatedCallback()]
    with dask.config.set({"taskdml.search.fits-per-task": fits_per_task}):
        search = GridSearchCV(
            MaxIterEstimator(), {"max_iter": [1, 2, 3]}, cv=2, scoring=constant_score
        )
        search.set_callbacks(*callbacks).fit(X, y)
    # the refit is the best candidate's own fit on every row, as scikit-learn's would be
    refit = MaxIterEstimator(**search.best_params_).fit(X, y)
    assert search.best_estimator_.n_iter_ == refit.n_iter_
    own = 1 + 1 + 1 + 3 * 2  # the fit, the search, the refit, every candidate x fold
    inner = (1 + 2 + 3) * 2 + search.best_estimator_.n_iter_
    for callback, expected in zip(callbacks, (own, own + inner)):
        assert callback.count_hooks("setup") == 1
        assert callback.count_hooks("on_fit_task_begin") == expected
        assert callback.count_hooks("on_fit_task_end") == expected
