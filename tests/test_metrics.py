"""Tests of taskdml.metrics: chunk-wise metrics equal scikit-learn's on all the data at once."""

import doctest

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
from dask.utils import key_split
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_classification, make_regression
from sklearn.decomposition import PCA
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.metrics import accuracy_score, get_scorer, log_loss, roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier

import taskdml.metrics
from taskdml._keys import step_scope
from taskdml.exceptions import DataError
from taskdml.metrics import available_metrics, evaluate, evaluate_graph

CHUNKS = (700, 1000, 1, 299, 1000)  # uneven, with a one-row chunk: 3000 rows
TOLERANCE = {"rel": 1e-12, "abs": 1e-12}

CLASSIFICATION = [
    "accuracy",
    "balanced_accuracy",
    *(
        f"{kind}_{average}"
        for kind in ("precision", "recall", "f1")
        for average in ("macro", "micro", "weighted")
    ),
    "log_loss",
    "neg_log_loss",
    "roc_auc_ovr",
    "roc_auc_ovr_weighted",
    "roc_auc_ovo",
    "roc_auc_ovo_weighted",
    "average_precision",
]
BINARY_ONLY = ["precision", "recall", "f1", "roc_auc"]
REGRESSION = [
    "r2",
    "explained_variance",
    "mean_squared_error",
    "mse",
    "neg_mean_squared_error",
    "root_mean_squared_error",
    "rmse",
    "neg_root_mean_squared_error",
    "mean_absolute_error",
    "mae",
    "neg_mean_absolute_error",
    "max_error",
    "neg_max_error",
]
METRICS_OF = {
    "binary": CLASSIFICATION + BINARY_ONLY,
    "binary_tree": CLASSIFICATION + BINARY_ONLY,  # few distinct scores: ties everywhere
    "multiclass": CLASSIFICATION,
    "regression": REGRESSION,
}
# Names that are not scikit-learn scorer names: the scorer that negates them.
NEGATED_SCORER = {
    "log_loss": "neg_log_loss",
    "mean_squared_error": "neg_mean_squared_error",
    "mse": "neg_mean_squared_error",
    "root_mean_squared_error": "neg_root_mean_squared_error",
    "rmse": "neg_root_mean_squared_error",
    "mean_absolute_error": "neg_mean_absolute_error",
    "mae": "neg_mean_absolute_error",
    "max_error": "neg_max_error",
}


def reference(name, model, X, y):
    """scikit-learn's value of metric *name* on all the data."""
    if name in NEGATED_SCORER:
        return -get_scorer(NEGATED_SCORER[name])(model, X, y)
    return get_scorer(name)(model, X, y)


def as_dataset(X, y, chunks=CHUNKS):
    """The data convention: X (sample, feature) and y (sample), chunked along sample."""
    return xr.Dataset(
        {
            "X": (("sample", "feature"), da.from_array(X, chunks=(chunks, X.shape[1]))),
            "y": ("sample", da.from_array(y, chunks=(chunks,))),
        }
    )


class Problem:
    """Data, preprocessing fitted on it, a model fitted after them, and X as the model sees it."""

    def __init__(self, X, y, model):
        self.X, self.y = X, y
        scaler = StandardScaler().fit(X)
        pca = PCA(n_components=X.shape[1] - 1, random_state=0).fit(scaler.transform(X))
        self.preprocess = [scaler, pca]
        self.Xt = pca.transform(scaler.transform(X))
        self.model = model.fit(self.Xt, y)
        self.data = as_dataset(X, y)


@pytest.fixture(scope="module")
def problems():
    """The four problems, built once: 3000 rows each."""
    Xb, yb = make_classification(3000, n_features=6, n_informative=4, random_state=0)
    Xm, ym = make_classification(3000, n_features=6, n_informative=4, n_classes=3, random_state=1)
    Xr, yr = make_regression(3000, n_features=5, noise=10.0, random_state=2)
    return {
        "binary": Problem(Xb, yb, LogisticRegression()),
        "binary_tree": Problem(Xb, yb, DecisionTreeClassifier(max_depth=3, random_state=0)),
        "multiclass": Problem(Xm, np.array(["ant", "bee", "cat"])[ym], LogisticRegression()),
        "regression": Problem(Xr, yr + 1000.0, Ridge(alpha=1.0)),  # offset: tests stability
    }


@pytest.fixture(scope="module")
def results(problems):
    """Every metric of every problem, chunk-wise on the local scheduler, one call each."""
    return {
        name: evaluate(p.model, p.data, METRICS_OF[name], preprocess=p.preprocess)
        for name, p in problems.items()
    }


@pytest.mark.parametrize(
    ("problem", "metric"), [(p, m) for p, names in METRICS_OF.items() for m in names]
)
def test_metric_equals_scikit_learn(problems, results, problem, metric):
    """The chunk-wise metric equals scikit-learn's on the concatenated data to 1e-12."""
    p = problems[problem]
    expected = reference(metric, p.model, p.Xt, p.y)
    assert results[problem][metric] == pytest.approx(expected, **TOLERANCE)


def test_every_metric_is_tested():
    """Each registered metric appears in the tables above, so a new one needs a test."""
    assert set(available_metrics()) == set(CLASSIFICATION + BINARY_ONLY + REGRESSION)
    assert set(available_metrics("regression")) == set(REGRESSION)


def test_result_keeps_the_order_asked_and_drops_repeats(problems):
    """The result's keys are the metric names in the order given, once each, with
    scikit-learn's values."""
    p = problems["binary"]
    result = evaluate(p.model, p.data, ["roc_auc", "accuracy", "roc_auc"], preprocess=p.preprocess)
    assert list(result) == ["roc_auc", "accuracy"]
    assert all(type(value) is float for value in result.values())
    for name in ("roc_auc", "accuracy"):
        assert result[name] == pytest.approx(reference(name, p.model, p.Xt, p.y), **TOLERANCE)


def test_preprocess_is_applied(problems):
    """The transformers in preprocess change what the model sees; without them it sees raw X."""
    p = problems["regression"]
    model = Ridge().fit(p.X, p.y)
    scaler = StandardScaler().fit(p.X + 1.0)
    with_scaler = evaluate(model, p.data, "mse", preprocess=[scaler])["mse"]
    without = evaluate(model, p.data, "mse")["mse"]
    expected = reference("mse", model, scaler.transform(p.X), p.y)
    assert with_scaler == pytest.approx(expected, **TOLERANCE)
    assert without == pytest.approx(reference("mse", model, p.X, p.y), **TOLERANCE)
    assert with_scaler != pytest.approx(without)


def test_pipeline_model(problems):
    """A scikit-learn Pipeline is evaluated like any estimator."""
    p = problems["multiclass"]
    model = make_pipeline(StandardScaler(), LogisticRegression()).fit(p.X, p.y)
    result = evaluate(model, p.data, ["f1_macro", "roc_auc_ovr", "log_loss"])
    for name, value in result.items():
        assert value == pytest.approx(reference(name, model, p.X, p.y), **TOLERANCE)


@pytest.mark.parametrize(
    "layout",
    ["features chunked", "y chunked differently", "numpy backed", "empty chunk", "one chunk"],
)
def test_chunk_layouts(problems, layout):
    """X chunked along features, misaligned y, in-memory data and empty chunks all work."""
    p = problems["binary"]
    X, y = da.from_array(p.X, chunks=(CHUNKS, -1)), da.from_array(p.y, chunks=(CHUNKS,))
    if layout == "features chunked":
        X = X.rechunk((CHUNKS, 2))
    elif layout == "y chunked differently":
        y = y.rechunk(512)
    elif layout == "numpy backed":
        X, y = p.X, p.y
    elif layout == "empty chunk":
        X, y = X.rechunk(((1500, 0, 1500), -1)), y.rechunk(((1500, 0, 1500),))
    else:
        X, y = X.rechunk((-1, -1)), y.rechunk(-1)
    data = xr.Dataset({"X": (("sample", "feature"), X), "y": ("sample", y)})
    names = ["accuracy", "log_loss", "roc_auc"]
    result = evaluate(p.model, data, names, preprocess=p.preprocess)
    for name in names:
        assert result[name] == pytest.approx(reference(name, p.model, p.Xt, p.y), **TOLERANCE)


@settings(max_examples=20, deadline=None)
@given(
    cuts=st.lists(st.integers(1, 199), max_size=6, unique=True),
    seed=st.integers(0, 2**16),
)
def test_result_does_not_depend_on_chunking(cuts, seed):
    """For any chunking, classification and regression metrics equal scikit-learn's."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(200, 3))
    y_class = (X[:, 0] + rng.normal(size=200) > 0).astype(int)
    y_reg = X @ [1.0, -2.0, 0.5] + rng.normal(size=200)
    bounds = [0, *sorted(cuts), 200]
    chunks = tuple(b - a for a, b in zip(bounds, bounds[1:]))
    classifier = LogisticRegression().fit(X, y_class)
    regressor = LinearRegression().fit(X, y_reg)
    with dask.config.set(scheduler="synchronous"):
        got_class = evaluate(
            classifier, as_dataset(X, y_class, chunks), ["f1", "log_loss", "roc_auc"]
        )
        got_reg = evaluate(regressor, as_dataset(X, y_reg, chunks), ["r2", "explained_variance"])
    for name, value in got_class.items():
        assert value == pytest.approx(reference(name, classifier, X, y_class), **TOLERANCE)
    for name, value in got_reg.items():
        assert value == pytest.approx(reference(name, regressor, X, y_reg), **TOLERANCE)


def test_without_a_client(problems):
    """With no distributed client, evaluate runs on Dask's local scheduler."""
    from distributed import default_client

    with pytest.raises(ValueError):
        default_client()
    p = problems["binary"]
    result = evaluate(p.model, p.data, ["accuracy"], preprocess=p.preprocess)
    assert result["accuracy"] == pytest.approx(reference("accuracy", p.model, p.Xt, p.y))


def test_on_the_cluster(client, problems, results):
    """On a real cluster, plain, future and delayed models give scikit-learn's numbers (and
    the local scheduler's)."""
    for name in ("binary", "multiclass", "regression"):
        p = problems[name]
        got = evaluate(p.model, p.data, METRICS_OF[name], preprocess=p.preprocess)
        assert got == pytest.approx(results[name], **TOLERANCE)
        for metric in METRICS_OF[name]:
            expected = reference(metric, p.model, p.Xt, p.y)
            assert got[metric] == pytest.approx(expected, **TOLERANCE)
    p = problems["binary"]
    as_futures = client.scatter([p.model, *p.preprocess])
    as_delayed = [dask.delayed(obj) for obj in (p.model, *p.preprocess)]
    for model, *preprocess in (as_futures, as_delayed):
        got = evaluate(model, p.data, METRICS_OF["binary"], preprocess=preprocess)
        assert got == pytest.approx(results["binary"], **TOLERANCE)


def test_unseen_labels_on_the_cluster(client, problems):
    """Labels of y outside classes_ raise DataError naming the chunk and the labels."""
    p = problems["binary"]
    y = p.y.copy()
    y[1701] = 7
    y[1800:1803] = 2
    data = as_dataset(p.X, y)
    with pytest.raises(
        DataError,
        match=r"^chunk 3 \(samples 1701 to 1999\) of y has labels \[2, 7\] that the model does "
        r"not know; its classes_ are \[0, 1\]\. Evaluate on data with the model's classes only",
    ):
        evaluate(p.model, data, ["accuracy"], preprocess=p.preprocess)
    # Without the rows of unknown labels the same chunks evaluate to scikit-learn's accuracy.
    known = (y == 0) | (y == 1)
    kept = as_dataset(p.X[known], y[known], chunks=(700, 1000, 1, 295, 1000))
    got = evaluate(p.model, kept, ["accuracy"], preprocess=p.preprocess)
    expected = reference("accuracy", p.model, p.Xt[known], y[known])
    assert got["accuracy"] == pytest.approx(expected, **TOLERANCE)


def test_keys_are_named_and_the_model_is_one_key(problems):
    """Keys follow key_name; the model and each transformer are one key, not one per chunk."""
    p = problems["binary"]
    graph = evaluate_graph(p.model, p.data, ["accuracy", "roc_auc"], preprocess=p.preprocess)
    ours = [key for key in dict(graph.__dask_graph__()) if key_split(key).startswith("evaluate")]
    groups = [key_split(key) for key in ours]
    assert groups.count("evaluate-model") == 1
    assert groups.count("evaluate-preprocess") == 2
    assert groups.count("evaluate-statistics") == len(CHUNKS)
    assert groups.count("evaluate-score") == 1
    statistics = sorted(key for key in ours if key_split(key) == "evaluate-statistics")
    assert [key[1] for key in statistics] == list(range(len(CHUNKS)))
    (computed,) = dask.compute(graph, scheduler="sync")
    for name in ("accuracy", "roc_auc"):
        assert computed[name] == pytest.approx(reference(name, p.model, p.Xt, p.y), **TOLERANCE)
    with step_scope("report"):
        graph = evaluate_graph(p.model, p.data, ["accuracy"])
    assert key_split(graph.key) == "report-score"
    again = evaluate_graph(p.model, p.data, ["accuracy"])
    assert again.key == evaluate_graph(p.model, p.data, ["accuracy"]).key  # deterministic


def test_tree_reduction(problems):
    """A small split_every builds a deeper combine tree with the same result."""
    p = problems["regression"]
    graph = evaluate_graph(p.model, p.data, REGRESSION, preprocess=p.preprocess, split_every=2)
    keys = dict(graph.__dask_graph__())
    levels = {key[1] for key in keys if key_split(key) == "evaluate-combine"}
    assert levels == {0, 1, 2}
    (result,) = dask.compute(graph)
    for name in REGRESSION:
        assert result[name] == pytest.approx(reference(name, p.model, p.Xt, p.y), **TOLERANCE)


def _binary(problems):
    p = problems["binary"]
    return p.model, p.data, p.preprocess


def _multiclass(problems):
    p = problems["multiclass"]
    return p.model, p.data, p.preprocess


def _regression(problems):
    p = problems["regression"]
    return p.model, p.data, p.preprocess


def _string_binary(problems):
    p = problems["binary"]
    y = np.array(["no", "yes"])[p.y]
    return LogisticRegression().fit(p.X, y), as_dataset(p.X, y), ()


def _raw(model, problem="binary"):
    def build(problems):
        p = problems[problem]
        return model(p), p.data, ()

    return build


ERRORS = [
    (
        _binary,
        ["acuracy"],
        r"^unknown metric 'acuracy'\. Did you mean 'accuracy'\? Valid metrics: accuracy, "
        r"average_precision, balanced_accuracy,",
    ),
    (_binary, [], r"^no metrics to evaluate; choose from accuracy, "),
    (
        _raw(lambda p: StandardScaler().fit(p.X)),
        ["accuracy"],
        r"^StandardScaler\(\) has no predict method \(a transformer\), so it cannot be "
        r"evaluated; pass transformers in preprocess=\[\.\.\.\]",
    ),
    (
        _raw(lambda p: LinearSVC().fit(p.X, p.y)),
        ["log_loss"],
        r"^metric 'log_loss' needs the model's predict_proba, but LinearSVC\(\) has none",
    ),
    (
        _raw(lambda p: LinearSVC().fit(p.X, p.y)),
        ["roc_auc_ovr"],
        r"^metric 'roc_auc_ovr' needs the model's predict_proba, but LinearSVC\(\) has none",
    ),
    (
        _regression,
        ["accuracy"],
        r"^metric 'accuracy' is a classification metric, but Ridge\(\) is a regressor; "
        r"metrics for a regressor: explained_variance, ",
    ),
    (
        _binary,
        ["r2"],
        r"^metric 'r2' is a regression metric, but LogisticRegression\(\) is a classifier",
    ),
    (
        _multiclass,
        ["precision"],
        r"^metric 'precision' is binary but the model has 3 classes \['ant', 'bee', 'cat'\]; "
        r"use precision_macro, precision_micro or precision_weighted$",
    ),
    (
        _multiclass,
        ["roc_auc"],
        r"^metric 'roc_auc' is binary but the model has 3 classes \['ant', 'bee', 'cat'\]; "
        r"use 'roc_auc_ovr' or 'roc_auc_ovo'",
    ),
    (
        _string_binary,
        ["f1"],
        r"^metric 'f1' counts the class 1 as positive \(scikit-learn's pos_label=1\), but the "
        r"model's classes are \['no', 'yes'\]; use f1_macro or f1_weighted",
    ),
    (
        lambda problems: (*_binary(problems)[:2], [LogisticRegression()]),
        ["accuracy"],
        r"^preprocess holds LogisticRegression\(\), which has no transform method",
    ),
    (
        lambda problems: (_binary(problems)[0], problems["binary"].X, ()),
        ["accuracy"],
        r"^data must be an xarray\.Dataset with variables 'X' \(dims sample, feature\) and "
        r"'y' \(dims sample\); got ndarray$",
    ),
    (
        lambda problems: (
            _binary(problems)[0],
            problems["binary"].data.rename({"y": "Y"}),
            problems["binary"].preprocess,
        ),
        ["accuracy"],
        r"^data has no variable 'y'\. Did you mean 'Y'\? Its variables are \['X', 'Y'\]",
    ),
]


@pytest.mark.parametrize(
    ("build", "metrics", "message"),
    ERRORS,
    ids=[
        "unknown metric",
        "no metrics",
        "transformer as model",
        "no predict_proba",
        "no predict_proba ovr",
        "classification metric on regressor",
        "regression metric on classifier",
        "binary precision on three classes",
        "binary roc_auc on three classes",
        "no positive class 1",
        "preprocess without transform",
        "data not a Dataset",
        "data without y",
    ],
)
def test_errors(problems, build, metrics, message):
    """Mistakes raise DataError with a message that says what and how to fix it."""
    model, data, preprocess = build(problems)
    with pytest.raises(DataError, match=message):
        evaluate(model, data, metrics, preprocess=preprocess)


def test_delayed_model_is_checked_in_the_task(problems):
    """A delayed model without predict_proba fails inside the chunk task with the same text."""
    p = problems["binary"]
    model = dask.delayed(LinearSVC().fit(p.X, p.y))
    with pytest.raises(DataError, match=r"^metric 'log_loss' needs the model's predict_proba"):
        evaluate(model, p.data, ["log_loss"])
    # The metrics it can compute, it computes in the task: scikit-learn's on all the rows.
    got = evaluate(model, p.data, ["accuracy", "f1"])
    fitted = LinearSVC().fit(p.X, p.y)
    for name in ("accuracy", "f1"):
        assert got[name] == pytest.approx(reference(name, fitted, p.X, p.y), **TOLERANCE)


def test_multiclass_ranking_needs_every_class(problems):
    """roc_auc_ovr with a class absent from y raises, as scikit-learn does."""
    p = problems["multiclass"]
    keep = p.y != "cat"
    with pytest.raises(ValueError):
        reference("roc_auc_ovr", p.model, p.Xt[keep], p.y[keep])
    data = as_dataset(p.X[keep], p.y[keep], chunks=500)
    with pytest.raises(
        DataError,
        match=r"^roc_auc_ovr needs samples of every class of the model in y, but "
        r"classes \['cat'\] have none",
    ):
        evaluate(p.model, data, ["roc_auc_ovr"], preprocess=p.preprocess)
    # Metrics that do not rank need no class of the model in y: scikit-learn's values.
    got = evaluate(p.model, data, ["accuracy", "f1_macro"], preprocess=p.preprocess)
    for name in ("accuracy", "f1_macro"):
        expected = reference(name, p.model, p.Xt[keep], p.y[keep])
        assert got[name] == pytest.approx(expected, **TOLERANCE), name
    # log_loss takes the model's classes as labels (scikit-learn's scorer raises without them).
    got = evaluate(p.model, data, ["log_loss"], preprocess=p.preprocess)
    expected = log_loss(p.y[keep], p.model.predict_proba(p.Xt[keep]), labels=p.model.classes_)
    assert got["log_loss"] == pytest.approx(expected, **TOLERANCE)


def test_unfitted_model(problems):
    """An unfitted plain model is refused before anything runs, with scikit-learn's error."""
    with pytest.raises(NotFittedError) as ours:
        evaluate(LogisticRegression(), problems["binary"].data, ["accuracy"])
    with pytest.raises(NotFittedError) as theirs:
        LogisticRegression().predict(problems["binary"].X)
    assert str(ours.value) == str(theirs.value)


def test_docstring_examples():
    """The examples in the module's docstrings run; evaluate's example, which only bounds its
    accuracy, gives scikit-learn's accuracy and ROC AUC on its data."""
    failures, tried = doctest.testmod(taskdml.metrics)
    assert tried > 0 and failures == 0
    X = np.random.default_rng(0).normal(size=(100, 3))
    y = (X[:, 0] > 0).astype(int)
    model = LogisticRegression().fit(X, y)
    scores = evaluate(model, as_dataset(X, y, chunks=30), ["accuracy", "roc_auc"])
    assert scores["accuracy"] == pytest.approx(accuracy_score(y, model.predict(X)), **TOLERANCE)
    expected_auc = roc_auc_score(y, model.predict_proba(X)[:, 1])
    assert scores["roc_auc"] == pytest.approx(expected_auc, **TOLERANCE)
