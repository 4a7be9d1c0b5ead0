"""``epochs="auto"``: training goes as far as the estimator's own ``fit`` would.

Oracles: a reference loop of sync replicas written in ``reference_loops`` (its loss before each
chunk, scikit-learn's no-improvement count, written there from the definition), the hinge
loss written here, scikit-learn's ``fit`` itself (the in-memory route must be it, bit for
bit), and ``GaussianNB.fit`` for a one-pass family.
"""

import time
import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.cluster import MiniBatchKMeans
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import SGDClassifier
from sklearn.naive_bayes import GaussianNB
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from taskdml import DataParallel
from taskdml.parallel import train
from taskdml.parallel.engine._payoff import (
    SHIP_BYTES_PER_S,
    distributing_pays,
    least_epochs,
    weigh,
)
from taskdml.parallel.engine._train import _stopping_rule
from tests.parallel.reference_loops import (
    chunks_of,
    merge_linear_sgd,
    reference_sync_until,
)

X_NP, Y_NP = load_breast_cancer(return_X_y=True)
X_NP = StandardScaler().fit_transform(X_NP)
CHUNK_ROWS = (100, 100, 100, 100, 100, 69)


def _dask(X, y):
    return da.from_array(X, chunks=(CHUNK_ROWS, -1)), da.from_array(y, chunks=(CHUNK_ROWS,))


def hinge(model, X, y):
    """The hinge loss of a binary linear model, summed over rows, from its definition."""
    signs = np.where(y == model.classes_[1], 1.0, -1.0)
    return float(np.maximum(0.0, 1.0 - model.decision_function(X) * signs).sum())


def _defined_loss(model, X, y):
    """The summed SGD loss of *model* on (X, y) from the definitions in scikit-learn's
    ``_sgd_fast`` (per one-vs-all problem, labels as +1/-1), on ``decision_function``."""
    if model.loss == "squared_error":  # a regressor: its prediction is its decision
        return float((0.5 * (model.predict(X) - y) ** 2).sum())
    p = model.decision_function(X)
    classes = model.classes_
    signs = np.where(y[:, None] == classes[None, :], 1.0, -1.0)
    z = p * (signs[:, 1] if p.ndim == 1 else signs)
    losses = {
        "log_loss": np.logaddexp(0.0, -z),
        "hinge": np.maximum(0.0, 1.0 - z),
        "modified_huber": np.where(z >= 1, 0.0, np.where(z >= -1, (1 - z) ** 2, -4 * z)),
    }
    return float(losses[model.loss].sum())


@pytest.mark.parametrize("loss", ["log_loss", "hinge", "modified_huber"])
@pytest.mark.parametrize("data", ["binary", "multiclass", "sparse", "float32", "frame"])
def test_the_progressive_loss_is_its_definition(loss, data):
    """The chunk loss the stopping rule sums equals the loss written from its definition
    on ``decision_function``, for arrays, sparse matrices, float32 and DataFrames (the
    last through ``decision_function`` itself)."""
    import pandas as pd
    import scipy.sparse

    from taskdml.parallel.merge._stopping import _sgd_loss

    X, y = load_digits(return_X_y=True) if data == "multiclass" else (X_NP, Y_NP)
    X = X / 16.0 if data == "multiclass" else X
    model = SGDClassifier(loss=loss, max_iter=5, tol=None, random_state=0).fit(X, y)
    chunk = {
        "sparse": scipy.sparse.csr_matrix(np.where(np.abs(X) > 0.5, X, 0.0)),
        "float32": X.astype(np.float32),
        "frame": pd.DataFrame(X),
    }.get(data, X)
    reference = X if data in ("binary", "multiclass", "frame") else chunk
    expected = _defined_loss(model, reference, y)
    assert _sgd_loss(model, chunk, y) == pytest.approx(expected, rel=1e-12)


def test_the_progressive_loss_of_a_regressor_and_a_wrong_width():
    """A regressor's squared loss is its definition; a chunk of the wrong width gets
    scikit-learn's own message, not a matrix product's."""
    from sklearn.linear_model import SGDRegressor

    from taskdml.parallel.merge._stopping import _sgd_loss

    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    model = SGDRegressor(max_iter=5, tol=None, random_state=0).fit(X, y)
    assert _sgd_loss(model, X, y) == pytest.approx(_defined_loss(model, X, y), rel=1e-12)
    with pytest.raises(ValueError, match="expecting 30 features"):
        _sgd_loss(model, X[:, :29], y)


@pytest.mark.parametrize("n_replicas", [1, 2])
def test_sync_auto_stops_where_the_reference_loop_does(n_replicas):
    """Sync replicas with epochs="auto" train the epochs, the losses and the model of the
    reference loop that stops by scikit-learn's rule on the progressive hinge loss."""
    estimator = SGDClassifier(max_iter=40, tol=1e-3, n_iter_no_change=3, random_state=0)
    result = train(
        clone(estimator),
        *_dask(X_NP, Y_NP),
        epochs="auto",
        strategy="sync",  # small data: the default would fit it at once
        n_replicas=n_replicas,
        sync_every=1,
        shuffle=False,
        client=False,
    )
    expected, means = reference_sync_until(
        clone(estimator),
        chunks_of(X_NP, Y_NP, CHUNK_ROWS),
        np.unique(Y_NP),
        merge_linear_sgd,
        hinge,
        n_replicas=n_replicas,
        sync_every=1,
        max_epochs=40,
        tol=1e-3,
        patience=3,
    )
    assert len(means) < 40  # the rule stopped it, not the epoch limit
    assert [entry["epoch"] for entry in result.history] == list(range(1, len(means) + 1))
    np.testing.assert_allclose([e["train_loss"] for e in result.history], means, rtol=1e-10)
    np.testing.assert_allclose(result.estimator.coef_, expected.coef_, rtol=1e-10)
    assert "did not improve by tol=0.001 for 3 epochs" in result.stats["stopped"]
    assert result.stats["stopping"].startswith("SGDClassifier(max_iter=40")


def test_sequential_auto_follows_the_same_rule():
    """One replica through the chunks (sequential) stops where one sync replica does: the
    same reference loop with R = 1."""
    estimator = SGDClassifier(max_iter=40, tol=1e-3, n_iter_no_change=3, random_state=0)
    result = train(
        clone(estimator), *_dask(X_NP, Y_NP), epochs="auto", strategy="sequential",
        shuffle=False, client=False,
    )  # fmt: skip
    expected, means = reference_sync_until(
        clone(estimator), chunks_of(X_NP, Y_NP, CHUNK_ROWS), np.unique(Y_NP),
        merge_linear_sgd, hinge, n_replicas=1, sync_every=1, max_epochs=40, tol=1e-3,
        patience=3,
    )  # fmt: skip
    np.testing.assert_allclose([e["train_loss"] for e in result.history], means, rtol=1e-10)
    np.testing.assert_allclose(result.estimator.coef_, expected.coef_, rtol=1e-10)


def test_the_epoch_limit_warns_as_scikit_learn_does():
    """max_iter reached before the loss settles: ConvergenceWarning, and stats say so; the
    epochs trained are those of scikit-learn's fit, which warns too."""
    estimator = SGDClassifier(max_iter=2, random_state=0)
    with pytest.warns(ConvergenceWarning, match="maximum number of epochs"):
        result = train(
            clone(estimator), *_dask(X_NP, Y_NP), epochs="auto", strategy="sync",
            n_replicas=2, client=False,
        )  # fmt: skip
    assert len(result.history) == 2 and result.stats["stopped"] == "2 epochs done"
    with pytest.warns(ConvergenceWarning):
        reference = clone(estimator).fit(X_NP, Y_NP)
    assert result.history[-1]["epoch"] == reference.n_iter_


def test_async_auto_stops_on_the_servers_epoch_losses(client):
    """Async replicas on the cluster: the server adds every push's loss to its epoch and stops
    the training by the rule; the losses it recorded follow it (no epoch after the stop)."""
    estimator = SGDClassifier(max_iter=60, tol=1e-3, n_iter_no_change=3, random_state=0)
    result = train(
        estimator, *_dask(X_NP, Y_NP), epochs="auto", strategy="async", n_replicas=2,
        random_state=0, client=client,
    )  # fmt: skip
    losses = [entry["train_loss"] for entry in result.history if "train_loss" in entry]
    # scikit-learn's rule, written here, says the last recorded epoch is the one to stop at
    best, count, stop_at = np.inf, 0, None
    for epoch, value in enumerate(losses, start=1):
        count = count + 1 if value > best - 1e-3 else 0
        best = min(best, value)
        if count >= 3 and stop_at is None:
            stop_at = epoch
    assert stop_at == result.history[-1]["epoch"] < 60
    assert "did not improve" in result.stats["stopped"]
    # stopped by the rule, the model is as good as scikit-learn's fit stopped by it in memory
    expected = clone(estimator).fit(X_NP, Y_NP).score(X_NP, Y_NP)
    accuracy = result.estimator.score(X_NP, Y_NP)
    assert accuracy >= expected - 0.03, (accuracy, expected)


def test_one_pass_family_equals_its_fit(client):
    """GaussianNB: "auto" is one pass (its fit makes one), and the merged model equals
    GaussianNB.fit on all rows."""
    X, y = load_digits(return_X_y=True)
    X_dask, y_dask = da.from_array(X, chunks=450), da.from_array(y, 450)
    model = DataParallel(GaussianNB(), strategy="sync").fit(X_dask, y_dask)
    reference = GaussianNB().fit(X, y)
    assert model.n_epochs_ == 1 and model.strategy_ == "sync"
    np.testing.assert_allclose(model.estimator_.theta_, reference.theta_, rtol=1e-10)
    np.testing.assert_allclose(model.estimator_.var_, reference.var_, rtol=1e-8)


def test_small_dask_data_is_fitted_at_once_on_a_worker(client):
    """Dask data of a few hundred KiB in 6 chunks, defaults: one est.fit on one worker over
    the chunks in order, which is scikit-learn's fit on the rows, bit for bit."""
    estimator = SGDClassifier(random_state=0)
    model = DataParallel(estimator).fit(*_dask(X_NP, Y_NP))
    reference = clone(estimator).fit(X_NP, Y_NP)
    np.testing.assert_array_equal(model.estimator_.coef_, reference.coef_)
    assert model.strategy_ == "fit" and "one worker" in model.stats_["local"]


@pytest.mark.parametrize(
    "estimator",
    [
        make_pipeline(StandardScaler(), SGDClassifier(random_state=0)),  # the whole Pipeline
        GaussianNB(),  # a one-pass family too
    ],
    ids=["pipeline", "one-pass"],
)
def test_small_dask_data_fits_whole_pipelines_and_one_pass_families_at_once(client, estimator):
    """A Pipeline on small dask data is fitted whole in one task (no chunk-wise rounds for its
    scaler), as is a one-pass family: scikit-learn's fit on the rows, weights included."""
    weight = np.linspace(0.5, 1.5, len(Y_NP))
    X, y = _dask(X_NP, Y_NP)
    model = DataParallel(estimator).fit(
        X, y, sample_weight=da.from_array(weight, chunks=X.chunks[0])
    )
    last = estimator.steps[-1][0] + "__" if hasattr(estimator, "steps") else ""
    reference = clone(estimator).fit(X_NP, Y_NP, **{last + "sample_weight": weight})
    final = model.estimator_[-1] if hasattr(estimator, "steps") else model.estimator_
    expected = reference[-1] if hasattr(estimator, "steps") else reference
    learned = "coef_" if hasattr(expected, "coef_") else "theta_"
    np.testing.assert_array_equal(getattr(final, learned), getattr(expected, learned))
    assert model.strategy_ == "fit" and "one worker" in model.stats_["local"]


def test_small_in_memory_data_is_fitted_here_like_fit(client):
    """In-memory data of a few hundred KiB: DataParallel's default is est.fit where the data
    lies, so the model is scikit-learn's, bit for bit, and it says why."""
    estimator = SGDClassifier(random_state=0)
    model = DataParallel(estimator).fit(X_NP, Y_NP)
    reference = clone(estimator).fit(X_NP, Y_NP)
    np.testing.assert_array_equal(model.estimator_.coef_, reference.coef_)
    assert model.strategy_ == "fit" and model.n_epochs_ == reference.n_iter_
    assert "in-memory data" in model.stats_["local"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # explicit epochs keep their meaning: replicas
        explicit = DataParallel(clone(estimator), epochs=2, random_state=0).fit(X_NP, Y_NP)
    assert explicit.strategy_ == "sync" and explicit.n_epochs_ == 2


@pytest.mark.parametrize(
    "estimator",
    [
        SGDClassifier(tol=1e9, random_state=0),
        SGDClassifier(tol=1e9, n_iter_no_change=2, random_state=0),
        MLPClassifier(hidden_layer_sizes=(4,), tol=1e9, random_state=0),
    ],
    ids=["sgd", "sgd-patience-2", "mlp"],
)
def test_least_epochs_is_what_fit_runs_when_nothing_improves(estimator):
    """The fewest epochs a family's rule can train (what the in-memory payoff weighs) is
    what scikit-learn's own fit runs when no epoch counts as an improvement (tol=1e9)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = clone(estimator).fit(X_NP[:200], Y_NP[:200])
    rule = _stopping_rule(estimator, "auto", None, None, None, 200)
    assert least_epochs(rule) == fitted.n_iter_
    assert least_epochs(_stopping_rule(GaussianNB(), "auto", None, None, None, 200)) == 1


def test_in_memory_data_is_shipped_only_when_the_replicas_save_more_than_it_costs():
    """The payoff's rule, against its formula: w replicas save (1 - 1/w) of each of the
    least epochs; shipping costs the bytes at SHIP_BYTES_PER_S."""
    one_pass = _stopping_rule(GaussianNB(), "auto", None, None, None, 10**6)
    sgd = _stopping_rule(SGDClassifier(), "auto", None, None, None, 10**6)
    nbytes = 168_000_000
    ships = nbytes / SHIP_BYTES_PER_S
    epoch_s = 0.26  # GaussianNB.fit on 10^6 x 20 in memory (benchmarks/parity.py)
    pays, reason = weigh(epoch_s, one_pass, 2, nbytes)
    assert pays is (epoch_s * 0.5 > ships) is False
    assert f"about {ships:.2g} s" in reason and "estimator.fit in this process" in reason
    assert weigh(epoch_s, sgd, 2, nbytes) == (6 * epoch_s * 0.5 > ships, None) == (True, None)
    assert weigh(epoch_s, one_pass, 16, nbytes / 10)[0] is (epoch_s * 15 / 16 > ships / 10)


class _RecordedBatches(MiniBatchKMeans):
    """MiniBatchKMeans that records the rows of each ``partial_fit`` call (in the class:
    the probe trains a clone)."""

    batches = []

    def partial_fit(self, X, y=None, sample_weight=None):
        _RecordedBatches.batches.append(len(X))
        return super().partial_fit(X, y, sample_weight=sample_weight)


def test_the_payoff_probe_trains_in_the_families_own_mini_batches():
    """MiniBatchKMeans' partial_fit takes what it is given as one mini-batch; replicas (and
    its fit) step in batch_size rows, each step costing its own overhead, so the probe trains
    the same way: the probe's 10,000 rows of 10^6 (PROBE_SHARE) in 10 calls of at most 1,024
    rows, not one call of 10,000 (which measured a fifth of an epoch's cost)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10**6, 4))
    _RecordedBatches.batches = []
    distributing_pays(_RecordedBatches(random_state=0), X, None, None, X.nbytes, replicas=2)
    first = _RecordedBatches.batches[:10]
    assert sum(first) == 10_000 and max(first) <= 1_024, _RecordedBatches.batches


FIRST_CALL_S = 0.2


class _SlowFirstCall(GaussianNB):
    """GaussianNB whose first ``partial_fit`` also waits FIRST_CALL_S: the one-off cost a
    model's first call pays (its classes, buffers, first touches of the code)."""

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        if not hasattr(self, "classes_"):
            time.sleep(FIRST_CALL_S)
        return super().partial_fit(X, y, classes=classes, sample_weight=sample_weight)


def test_a_first_calls_one_off_cost_does_not_decide_the_payoff():
    """The probe's first call alone (FIRST_CALL_S over 2,000 of 10,000 rows: an epoch of
    about 1 s, 2 replicas saving 0.5 s against 0.4 s of shipping) would ship the data; the
    calls after it cost what training's calls cost (GaussianNB on 2,000 x 4: well under a
    millisecond), and with them fitting here wins."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(10_000, 4)), rng.integers(0, 2, 10_000)
    ships_s = 0.4
    pays, reason = distributing_pays(
        _SlowFirstCall(), X, y, None, ships_s * SHIP_BYTES_PER_S, replicas=2
    )
    assert pays is False and "estimator.fit in this process" in reason
    # a verdict far over the line is not probed again: a first call's cost only adds to it
    assert distributing_pays(_SlowFirstCall(), X, y, None, 1, replicas=2) == (True, None)
