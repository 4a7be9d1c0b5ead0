"""Training options against references: preprocess, shuffle_rows, staleness and async.

- ``preprocess``: training through fitted transformers equals training on data transformed
  beforehand, bit for bit;
- ``shuffle_rows``: a serial loop over the chunks with their rows permuted as the engine
  documents (seeded per epoch and chunk);
- ``staleness``: the order of the parameter server's updates, recorded by the estimator
  itself, shows no replica more than ``staleness`` chunks ahead of the slowest;
- ``DataParallel(strategy="async")``: holdout accuracy within stated points of sync and of
  scikit-learn's estimator fitted in memory.
"""

import copy
import inspect
import re

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import SGDClassifier, SGDRegressor
from sklearn.naive_bayes import MultinomialNB
from sklearn.preprocessing import StandardScaler
from sklearn.utils import check_random_state

from taskdml.model_selection import (
    ASHASearchCV,
    GridSearchCV,
    HyperbandSearchCV,
    RandomizedSearchCV,
    SuccessiveHalvingSearchCV,
)
from taskdml.parallel import ClassSharded, DataParallel, get_merge_rule, register_merge, train
from taskdml.parallel.engine import _options

CHUNK_ROWS = (200, 180, 220, 190, 210, 170)
_rng = np.random.default_rng(1)
X_NP = _rng.normal(size=(sum(CHUNK_ROWS), 4)) * [1.0, 10.0, 0.1, 3.0] + [0.0, 5.0, -1.0, 2.0]
Y_NP = (X_NP @ [1.0, 0.1, 5.0, -0.3] + _rng.normal(size=len(X_NP)) > 0).astype(int)


def _dask(X, y=None, rows=CHUNK_ROWS):
    X = da.from_array(X, chunks=(rows, X.shape[1]))
    return X if y is None else (X, da.from_array(y, chunks=(rows,)))


def _chunks(X, y, rows=CHUNK_ROWS):
    bounds = np.cumsum((0, *rows))
    return [(X[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


# -- preprocess ---------------------------------------------------------------------------


@pytest.mark.parametrize("use_client", [True, False], ids=["cluster", "threads"])
def test_preprocess_equals_training_on_transformed_data(request, use_client):
    """train(preprocess=[fitted scaler]) equals training on X scaled beforehand, bit for bit."""
    client = request.getfixturevalue("client") if use_client else False
    scaler = StandardScaler().fit(X_NP)
    kwargs = dict(
        classes=[0, 1], strategy="sync", n_replicas=2, epochs=2, random_state=0, client=client
    )
    inside = train(
        SGDClassifier(random_state=0), *_dask(X_NP, Y_NP), preprocess=[scaler], **kwargs
    ).estimator
    before = train(
        SGDClassifier(random_state=0), *_dask(scaler.transform(X_NP), Y_NP), **kwargs
    ).estimator
    np.testing.assert_array_equal(inside.coef_, before.coef_)
    np.testing.assert_array_equal(inside.intercept_, before.intercept_)
    assert inside.t_ == before.t_ == 1 + 2 * len(X_NP)
    # and the scaling mattered: without it SGD on these columns learns something else
    raw = train(SGDClassifier(random_state=0), *_dask(X_NP, Y_NP), **kwargs).estimator
    assert not np.allclose(raw.coef_, inside.coef_)


# -- shuffle_rows -------------------------------------------------------------------------


def _serial_with_rows_shuffled(estimator, X, y, epochs, random_state, shuffle_rows):
    """One replica's loop: chunks in order, rows of chunk i in epoch e permuted as documented."""
    seed = int(check_random_state(random_state).randint(2**31 - 1))
    model = copy.deepcopy(estimator)
    for epoch in range(epochs):
        for index, (X_chunk, y_chunk) in enumerate(_chunks(X, y)):
            if shuffle_rows:
                rows = np.random.default_rng([seed, epoch, index, 1]).permutation(len(X_chunk))
                X_chunk, y_chunk = X_chunk[rows], y_chunk[rows]
            model.partial_fit(X_chunk, y_chunk, classes=[0, 1])
    return model


@pytest.mark.parametrize("shuffle_rows", [False, True])
def test_shuffle_rows_permutes_the_rows_of_each_chunk(shuffle_rows):
    """One replica with shuffle_rows equals the serial loop over row-permuted chunks."""
    result = train(
        SGDClassifier(random_state=0),
        *_dask(X_NP, Y_NP),
        classes=[0, 1],
        strategy="sync",
        n_replicas=1,
        epochs=2,
        shuffle=False,
        shuffle_rows=shuffle_rows,
        random_state=7,
        client=False,
    )
    expected = _serial_with_rows_shuffled(
        SGDClassifier(random_state=0), X_NP, Y_NP, 2, 7, shuffle_rows
    )
    other = _serial_with_rows_shuffled(
        SGDClassifier(random_state=0), X_NP, Y_NP, 2, 7, not shuffle_rows
    )
    np.testing.assert_array_equal(result.estimator.coef_, expected.coef_)
    assert not np.array_equal(result.estimator.coef_, other.coef_)


def test_shuffle_rows_leaves_an_exact_merge_unchanged(client):
    """MultinomialNB's counts do not depend on row order: shuffled rows give sklearn's fit."""
    X = np.abs(X_NP)
    result = train(
        MultinomialNB(),
        *_dask(X, Y_NP),
        classes=[0, 1],
        strategy="sync",
        shuffle_rows=True,
        random_state=0,
    )
    reference = MultinomialNB().fit(X, Y_NP)
    np.testing.assert_allclose(
        result.estimator.feature_count_, reference.feature_count_, rtol=1e-12
    )
    np.testing.assert_allclose(
        result.estimator.feature_log_prob_, reference.feature_log_prob_, rtol=1e-12
    )


def test_sequential_strategy_shuffles_rows_too():
    """strategy="sequential" with shuffle_rows equals the serial loop over row-permuted chunks."""
    result = train(
        SGDClassifier(random_state=0),
        *_dask(X_NP, Y_NP),
        classes=[0, 1],
        strategy="sequential",
        epochs=2,
        shuffle=False,
        shuffle_rows=True,
        random_state=7,
        client=False,
    )
    expected = _serial_with_rows_shuffled(SGDClassifier(random_state=0), X_NP, Y_NP, 2, 7, True)
    np.testing.assert_array_equal(result.estimator.coef_, expected.coef_)


# -- staleness ----------------------------------------------------------------------------

# Rank 0 owns small chunks and rank 1 large ones, so without a bound rank 0 would run ahead.
STALE_ROWS = (20, 3_000) * 4
X_STALE = np.random.default_rng(2).normal(size=(sum(STALE_ROWS), 3))
Y_STALE = X_STALE @ [1.0, -2.0, 0.5]
_FIRST_VALUE = {X_STALE[a, 0]: i for i, a in enumerate(np.cumsum((0, *STALE_ROWS))[:-1])}


class RecordingSGDRegressor(SGDRegressor):
    """An SGDRegressor that records, in ``chunks_seen_``, the chunks that trained it."""

    def partial_fit(self, X, y, sample_weight=None):
        super().partial_fit(X, y, sample_weight=sample_weight)
        self.chunks_seen_ = [*getattr(self, "chunks_seen_", []), _FIRST_VALUE[X[0, 0]]]
        return self


_SGD_RULE = get_merge_rule(SGDRegressor())


def _merge_recording(replicas, weights):
    # The parameter server merges [its current state, one pushed replica]: the pushed
    # replica's last chunk is the update it brings.
    merged = _SGD_RULE.fn(replicas, weights)
    pushed = [r.chunks_seen_[-1] for r in replicas[1:]]
    merged.chunks_seen_ = list(replicas[0].chunks_seen_) + pushed
    return merged


register_merge(
    RecordingSGDRegressor,
    _merge_recording,
    family="recording-sgd",
    private_state=_SGD_RULE.private_state,
    start_state=_SGD_RULE.start_state,
)


@pytest.mark.parametrize("staleness", [0, 1, "default"])
def test_async_replica_never_runs_more_than_staleness_chunks_ahead(staleness):
    """Replayed from the recorded update order: no push from a replica more than staleness
    chunks ahead of the slowest one still training (the default: lock-step)."""
    given = {} if staleness == "default" else {"staleness": staleness}
    staleness = 0 if staleness == "default" else staleness
    result = train(
        RecordingSGDRegressor(random_state=0),
        *_dask(X_STALE, Y_STALE, STALE_ROWS),
        strategy="async",
        **given,
        n_replicas=2,
        epochs=2,
        shuffle=False,
        random_state=0,
        client=False,
    )
    order = result.estimator.chunks_seen_
    n_chunks, epochs = len(STALE_ROWS), 2
    assert sorted(order) == sorted(list(range(n_chunks)) * epochs)
    assert result.stats["updates"] == n_chunks * epochs
    owned = dict.fromkeys(range(2), epochs * n_chunks // 2)
    clocks = dict.fromkeys(owned, 0)
    for chunk in order:
        rank = chunk % 2
        training = [k for k in clocks if clocks[k] < owned[k]]
        assert clocks[rank] - min(clocks[k] for k in training) <= staleness, (order, staleness)
        clocks[rank] += 1


def test_default_staleness_is_bounded():
    """train and DataParallel default to the same bounded staleness: lock-step."""
    defaults = {
        inspect.signature(train).parameters["staleness"].default,
        DataParallel(SGDClassifier()).get_params()["staleness"],
    }
    assert defaults == {0}


@pytest.mark.parametrize("staleness", [0, None])
def test_versions_behind_are_recorded_per_push(staleness):
    """stats["versions_behind"] is (mean, most) over the pushes; in lock-step with two
    replicas no push is more than one version behind (the other replica's push); the model
    is the replay of the recorded pushes (reference_loops.py)."""
    from reference_loops import chunks_of, engine_seed, merge_linear_sgd, replay_async

    result = train(
        SGDRegressor(random_state=0),
        *_dask(X_STALE, Y_STALE, STALE_ROWS),
        strategy="async",
        staleness=staleness,
        n_replicas=2,
        epochs=2,
        random_state=0,
        client=False,
    )
    mean, most = result.stats["versions_behind"]
    assert 0 <= mean <= most <= (1 if staleness == 0 else result.stats["updates"] - 1)
    assert isinstance(most, int)
    expected = replay_async(
        SGDRegressor(random_state=0), chunks_of(X_STALE, Y_STALE, STALE_ROWS), None,
        merge_linear_sgd, [tuple(push) for push in result.stats["pushes"]], n_replicas=2,
        epochs=2, shuffle=True, seed=engine_seed(0),
    )  # fmt: skip
    np.testing.assert_array_equal(result.estimator.coef_, expected.coef_)


# -- DataParallel(strategy="async") -------------------------------------------------------


@pytest.mark.parametrize("use_client", [True, False], ids=["cluster", "threads"])
def test_async_with_the_default_staleness_is_within_two_points_of_sync(request, use_client):
    """With the default staleness, two async replicas score within 2 points of sync's
    holdout accuracy after 1 and 3 epochs, on a cluster and on threads; the async model is
    the replay of its recorded pushes (reference_loops.py)."""
    from reference_loops import chunks_of, engine_seed, merge_linear_sgd, replay_async

    client = request.getfixturevalue("client") if use_client else False
    X, y = make_classification(
        44_000, 20, n_informative=10, flip_y=0.02, class_sep=1.0, random_state=0
    )
    X_dask, y_dask = _dask(X[:40_000], y[:40_000], (4_000,) * 10)
    for epochs in (1, 3):
        results = {
            strategy: train(
                SGDClassifier(loss="log_loss", alpha=1e-2, random_state=0),
                X_dask,
                y_dask,
                strategy=strategy,
                epochs=epochs,
                n_replicas=2,
                random_state=0,
                client=client,
            )
            for strategy in ("sync", "async")
        }
        scores = {name: r.estimator.score(X[40_000:], y[40_000:]) for name, r in results.items()}
        assert abs(scores["async"] - scores["sync"]) <= 0.02, (epochs, scores)
        expected = replay_async(
            SGDClassifier(loss="log_loss", alpha=1e-2, random_state=0),
            chunks_of(X[:40_000], y[:40_000], (4_000,) * 10), [0, 1], merge_linear_sgd,
            [tuple(push) for push in results["async"].stats["pushes"]], n_replicas=2,
            epochs=epochs, shuffle=True, seed=engine_seed(0),
        )  # fmt: skip
        np.testing.assert_array_equal(results["async"].estimator.coef_, expected.coef_)


def test_data_parallel_async_accuracy_is_close_to_sync_and_scikit_learn(client):
    """Async DataParallel is within 2 points of sync and 3 of scikit-learn's in-memory fit."""
    X, y = make_classification(24_000, 10, n_informative=6, class_sep=1.2, random_state=0)
    X_train, y_train, X_test, y_test = X[:20_000], y[:20_000], X[20_000:], y[20_000:]
    X_dask, y_dask = _dask(X_train, y_train, (2_000,) * 10)
    params = dict(loss="log_loss", alpha=1e-3, random_state=0)
    scores = {
        strategy: DataParallel(SGDClassifier(**params), strategy=strategy, epochs=3, random_state=0)
        .fit(X_dask, y_dask)
        .score(X_test, y_test)
        for strategy in ("sync", "async")
    }
    in_memory = SGDClassifier(max_iter=3, tol=None, **params).fit(X_train, y_train)
    reference = in_memory.score(X_test, y_test)
    assert abs(scores["async"] - scores["sync"]) <= 0.02, scores
    assert abs(scores["async"] - reference) <= 0.03, (scores, reference)


# -- the table of options -----------------------------------------------------------------

SIGNATURES = [
    ("train", train),
    ("DataParallel", DataParallel),
    ("ClassSharded", ClassSharded),
    ("search", GridSearchCV),
    ("search", RandomizedSearchCV),
    ("adaptive", ASHASearchCV),
    ("adaptive", SuccessiveHalvingSearchCV),
    ("adaptive", HyperbandSearchCV),
]


@pytest.mark.parametrize("taker, entry_point", SIGNATURES, ids=[e.__name__ for _, e in SIGNATURES])
def test_each_entry_point_takes_the_tables_options_with_its_defaults(taker, entry_point):
    """The options table (engine/_options.py) and the signatures agree: every option an entry
    point takes is a parameter of it, with the table's default for that entry point."""
    parameters = inspect.signature(entry_point).parameters
    for name, default in _options.defaults(taker).items():
        assert name in parameters, name
        assert parameters[name].default == default, name


@pytest.mark.parametrize(
    "options, message",
    [
        ({"strategy": "synk"}, "train: strategy must be one of 'sync', 'async', 'sequential'; "
         "got 'synk'. Did you mean 'sync'?"),
        ({"epochs": 0}, "train: epochs must be an integer >= 1 or 'auto' (as far as the "
         "estimator's own fit would train); got 0."),
        ({"staleness": -1}, "train: staleness must be an integer >= 0 or None; got -1."),
        ({"shuffle": "yes"}, "train: shuffle must be True or False; got 'yes'."),
        ({"n_replicas": 0}, "train: n_replicas must be an integer >= 1 or None; got 0."),
        ({"data": "steam"}, "train: data must be one of 'auto', 'persist', 'stream'; got "
         "'steam'. Did you mean 'stream'?"),
        ({"prefetch": 1.5}, "train: prefetch must be an integer >= 0; got 1.5."),
        ({"tol": "small"}, "train: tol must be a number; got 'small'."),
    ],
)  # fmt: skip
def test_train_names_a_bad_option_before_it_trains(options, message):
    """train refuses a bad option with the table's message, naming the option and the value."""
    X, y = _dask(X_NP, Y_NP)
    with pytest.raises(ValueError, match=re.escape(message)):
        train(SGDClassifier(), X, y, client=False, **options)


def test_a_default_always_passes_its_entry_points_check():
    """strategy=None is train's, DataParallel's and the grid searches' default ("choose"),
    so they take it; an adaptive search, whose default is "sequential", does not."""
    assert _options.check("train", {"strategy": None}) == {"strategy": None}
    assert _options.check("DataParallel", {"strategy": None}) == {"strategy": None}
    assert _options.check("search", {"strategy": None}) == {"strategy": None}
    with pytest.raises(ValueError, match="ASHASearchCV: strategy must be one of"):
        _options.check("adaptive", {"strategy": None}, "ASHASearchCV")
