"""Adaptive searches: ASHA, successive halving and Hyperband, on a real cluster and in process."""

import doctest
import math
import uuid
import warnings

import dask.array as da
import numpy as np
import pytest
from distributed.diagnostics.plugin import SchedulerPlugin
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import loguniform
from sklearn.datasets import make_classification as sk_make_classification
from sklearn.exceptions import FitFailedWarning
from sklearn.linear_model import LogisticRegression, SGDClassifier, SGDRegressor
from sklearn.metrics import accuracy_score, make_scorer
from sklearn.model_selection import ParameterSampler
from sklearn.utils.estimator_checks import parametrize_with_checks

from taskdml.datasets import make_classification
from taskdml.model_selection._space import candidates
from taskdml.model_selection.adaptive import _policy as _adaptive_policy
from taskdml.model_selection.adaptive import _run as _adaptive_run
from taskdml.model_selection.adaptive import _search as _adaptive
from taskdml.model_selection.adaptive._policy import ASHA, Halving, hyperband_brackets
from taskdml.model_selection.adaptive._search import (
    ASHASearchCV,
    HyperbandSearchCV,
    SuccessiveHalvingSearchCV,
)

ALPHAS = {"alpha": [1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1]}


def _data(n_samples=4_000, chunk_size=400, seed=0):
    return make_classification(
        n_samples, 10, n_informative=4, chunk_size=chunk_size, random_state=seed
    )


class StragglerSGD(SGDClassifier):
    """An SGDClassifier whose trial with alpha *slow_alpha* is held in its first partial_fit
    until another trial has trained past rung 0: a straggler by construction, not by timing.

    Every other trial sets the ``distributed.Event`` *overtaken* once it has seen more rows than
    the data set holds (it is in its second epoch, so ASHA promoted it). The straggler waits on
    that event at most *timeout* seconds, then raises: a search that waits for the straggler
    fails the trial instead of hanging.
    """

    def __init__(
        self,
        *,
        slow_alpha=None,
        overtaken=None,
        n_samples=0,
        timeout=60.0,
        alpha=1e-4,
        random_state=None,
    ):
        super().__init__(alpha=alpha, random_state=random_state)
        self.slow_alpha = slow_alpha
        self.overtaken = overtaken
        self.n_samples = n_samples
        self.timeout = timeout

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        from distributed import Event

        seen = getattr(self, "rows_seen_", 0)
        if self.alpha == self.slow_alpha and seen == 0:
            if not Event(self.overtaken).wait(timeout=self.timeout):
                raise RuntimeError("no other trial went past rung 0 while this one was held")
        elif seen >= self.n_samples and not getattr(self, "overtook_", False):
            Event(self.overtaken).set()
            self.overtook_ = True
        super().partial_fit(X, y, classes=classes, sample_weight=sample_weight)
        self.rows_seen_ = seen + len(X)
        return self


class FailingSGD(SGDClassifier):
    """An SGDClassifier whose partial_fit raises when its alpha is *failing_alpha*."""

    def __init__(self, *, failing_alpha=None, alpha=1e-4, random_state=None):
        super().__init__(alpha=alpha, random_state=random_state)
        self.failing_alpha = failing_alpha

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        if self.failing_alpha in (self.alpha, "all"):
            raise RuntimeError(f"this trial fails on purpose (alpha={self.alpha})")
        return super().partial_fit(X, y, classes=classes, sample_weight=sample_weight)


def _li_brackets(max_iter, eta=3):
    """Hyperband's brackets ``{s: (n_models, first_budget)}`` by Li et al.'s formulas, as
    dask-ml's ``_get_hyperband_params`` writes them, with ``s_max`` the largest ``s`` such that
    ``eta**s <= max_iter`` counted in integers (the documented fix of dask-ml's float log)."""
    s_max = 0
    while eta ** (s_max + 1) <= max_iter:
        s_max += 1
    return {
        s: (math.ceil((s_max + 1) * eta**s / (s + 1)), int(max_iter * eta**-s))
        for s in range(s_max + 1)
    }


def _halving_ends(n_models, first_budget, max_budget, eta=3):
    """``{budget: trials that end there}`` of one successive halving, by its arithmetic: rung
    i keeps ``n_models // eta**i`` trials (at least one) at ``first_budget * eta**i`` epochs."""
    ends = {}
    i = 0
    while first_budget * eta**i <= max_budget:
        budget = first_budget * eta**i
        kept = max(1, n_models // eta**i)
        going_on = max(1, n_models // eta ** (i + 1)) if budget * eta <= max_budget else 0
        ends[budget] = ends.get(budget, 0) + kept - going_on
        i += 1
    return ends


def _fold_scores(data, alpha, epochs):
    """scikit-learn's scores of one trial of a search with ``cv`` = the number of chunks and
    ``shuffle=False``: each fold holds out one chunk, whatever the seeded permutation, and
    trains SGDClassifier(alpha, random_state=0) for *epochs* epochs of ``partial_fit`` over the
    other chunks in their order. Returned sorted (which fold holds which chunk is seeded)."""
    X, y = data.X.values, data.y.values
    bounds = np.cumsum((0, *data.X.data.chunks[0]))
    parts = [(X[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    classes = np.unique(y)
    scores = []
    for held, (X_valid, y_valid) in enumerate(parts):
        model = SGDClassifier(alpha=alpha, random_state=0)
        for _ in range(epochs):
            for i, (X_part, y_part) in enumerate(parts):
                if i != held:
                    model.partial_fit(X_part, y_part, classes=classes)
        scores.append(accuracy_score(y_valid, model.predict(X_valid)))
    return sorted(scores)


def _reference_halving(data, n_trials, max_epochs, eta=3):
    """Synchronous successive halving worked out here, every result ``(trial, epochs, score)``:
    ParameterSampler's candidates with the search's seed (0), rung i at ``eta**i`` epochs
    keeping the best ``n_trials // eta**i`` (at least one; ties to the lower trial), a score
    the mean of :func:`_fold_scores`."""
    alphas = [c["alpha"] for c in ParameterSampler(ALPHAS, n_trials, random_state=0)]
    results, alive, rung = [], list(range(n_trials)), 0
    while True:
        epochs = eta**rung
        scores = {t: float(np.mean(_fold_scores(data, alphas[t], epochs))) for t in alive}
        results.extend((t, epochs, scores[t]) for t in alive)
        if epochs * eta > max_epochs:
            return sorted(results)
        rung += 1
        ranked = sorted(alive, key=lambda t: (-round(scores[t], 12), t))
        alive = ranked[: max(1, n_trials // eta**rung)]


# --------------------------------------------------------------------------------------------
# The rung logic, without a cluster.


def test_hyperband_brackets_match_dask_ml():
    """max_iter=81 gives dask-ml's documented brackets; 243 gives 6 (dask-ml's log bug gives 5);
    both are Li et al.'s formulas computed here, and so are the numbers of models and of
    partial_fit calls (epochs) of the halvings they run."""
    assert hyperband_brackets(81) == {4: (81, 1), 3: (34, 3), 2: (15, 9), 1: (8, 27), 0: (5, 81)}
    assert sorted(hyperband_brackets(243)) == [0, 1, 2, 3, 4, 5]
    assert hyperband_brackets(243)[5] == (243, 1)
    for max_iter in (9, 81, 243):
        assert hyperband_brackets(max_iter) == _li_brackets(max_iter)
    metadata = HyperbandSearchCV(SGDClassifier(), ALPHAS, max_iter=81).metadata
    assert (metadata["n_models"], metadata["partial_fit_calls"]) == (143, 1581)
    assert [b["decisions"] for b in metadata["brackets"]][-1] == [1, 3, 9, 27, 81]
    # Rung i of bracket s keeps n // 3**i models; each trains from the last rung's budget on.
    calls = 0
    for n_models, first in _li_brackets(81).values():
        budgets = [first * 3**i for i in range(5) if first * 3**i <= 81]
        calls += sum(
            n_models // 3**i * (budget - (budgets[i - 1] if i else 0))
            for i, budget in enumerate(budgets)
        )
    n_models = sum(n for n, _ in _li_brackets(81).values())
    assert (metadata["n_models"], metadata["partial_fit_calls"]) == (n_models, calls)
    assert [b["decisions"] for b in metadata["brackets"]][-1] == [3**i for i in range(5)]


def test_asha_promotes_from_the_results_recorded_so_far():
    """After three results at rung 0 the best is promoted at once, before trial 3 starts."""
    policy = ASHA(range(9), [1, 3, 9], eta=3)
    assert [policy.next_job() for _ in range(3)] == [(0, 0), (1, 0), (2, 0)]
    scores = [0.1, 0.9, 0.5]
    for trial, score in enumerate(scores):
        policy.record(trial, 0, score)
    promoted = policy.next_job()
    assert promoted == (1, 1)
    # The top len(scores) // eta = 1 of the results so far, computed here: the best one.
    assert promoted == (int(np.argmax(scores)), 1)
    assert policy.next_job() == (3, 0)


def test_asha_stops_a_trial_as_soon_as_it_can_never_be_promoted():
    """With 3 trials and eta=3 one can be promoted: the worse of two results stops at once."""
    policy = ASHA(range(3), [1, 3], eta=3)
    for _ in range(3):
        policy.next_job()
    scores = [0.1, 0.9]
    for trial, score in enumerate(scores):
        policy.record(trial, 0, score)
    finished = policy.take_finished()
    assert finished == [0]
    assert finished == [int(np.argmin(scores))]  # the worse one, computed here
    policy.record(2, 0, 0.5)
    assert policy.next_job() == (1, 1)
    assert sorted(policy.take_finished()) == [2]


class _NeverPrunes(ASHA):
    """ASHA that keeps every paused trial: the reference for the early stops."""

    def _stop_hopeless(self):
        pass


@settings(max_examples=100, deadline=None)
@given(
    data=st.data(),
    n_trials=st.integers(1, 30),
    eta=st.integers(2, 4),
    slots=st.integers(1, 6),
    n_rungs=st.integers(1, 4),
)
def test_asha_stops_only_trials_it_would_never_promote(data, n_trials, eta, slots, n_rungs):
    """Any order of results and failures: every promotion comes from the top 1/eta recorded so
    far, stopping hopeless trials early changes no decision, and every trial ends finished."""
    budgets = [1, 3, 9, 27][:n_rungs]
    policy, reference = (
        ASHA(range(n_trials), budgets, eta),
        _NeverPrunes(range(n_trials), budgets, eta),
    )
    running, finished, recorded = {}, set(), [{} for _ in budgets]
    while True:
        while len(running) < slots:
            job = policy.next_job()
            if job is None:
                break
            assert reference.next_job() == job
            trial, rung = job
            assert trial not in finished and trial not in running
            if rung > 0:
                top = sorted(recorded[rung - 1], key=lambda t: (-recorded[rung - 1][t], t))
                assert trial in top[: len(top) // eta]
                assert top.index(trial) < len(top) // eta  # its rank among the results so far
            running[trial] = rung
        if not running:
            assert reference.next_job() is None
            break
        trial = data.draw(st.sampled_from(sorted(running)))
        rung = running.pop(trial)
        if data.draw(st.integers(0, 9)) == 0:
            policy.fail(trial)
            reference.fail(trial)
            finished.add(trial)
        else:
            recorded[rung][trial] = data.draw(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]))
            policy.record(trial, rung, recorded[rung][trial])
            reference.record(trial, rung, recorded[rung][trial])
        finished.update(policy.take_finished())
    assert policy.done() and finished == set(range(n_trials))


def test_halving_waits_for_the_whole_rung():
    """Synchronous halving promotes nobody until every trial of the rung has reported."""
    policy = Halving(range(3), [(3, 1), (1, 3)])
    assert [policy.next_job() for _ in range(4)] == [(0, 0), (1, 0), (2, 0), None]
    scores = [0.9, 0.1]
    for trial, score in enumerate(scores):
        policy.record(trial, 0, score)
    assert policy.next_job() is None
    policy.fail(2)
    promoted = policy.next_job()
    assert promoted == (0, 1)
    assert promoted == (int(np.argmax(scores)), 1)  # the one kept: the best result
    assert sorted(policy.take_finished()) == [1]


def test_docstring_examples_run():
    """The examples in the modules' docstrings run (in process, without a client); the plan
    the successive halving example prints is its arithmetic, computed here: rung i keeps
    ``n_trials // eta**i`` trials at ``eta**i`` epochs, each training from the last rung's."""
    for module in (_adaptive, _adaptive_policy):
        failures, tried = doctest.testmod(module)
        assert tried > 0 and failures == 0
    n_trials, max_epochs, eta = 6, 9, 3
    metadata = SuccessiveHalvingSearchCV(
        SGDClassifier(random_state=0),
        {"alpha": [1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]},
        n_trials=n_trials,
        max_epochs=max_epochs,
        random_state=0,
    ).metadata
    budgets = [eta**i for i in range(max_epochs) if eta**i <= max_epochs]
    kept = [max(1, n_trials // eta**i) for i in range(len(budgets))]
    assert metadata["rungs"] == list(zip(kept, budgets))
    calls = sum(
        k * (b - (budgets[i - 1] if i else 0)) for i, (k, b) in enumerate(zip(kept, budgets))
    )
    assert metadata["partial_fit_calls"] == calls
    assert metadata["n_models"] == n_trials


# --------------------------------------------------------------------------------------------
# On the cluster.


class TransitionLog(SchedulerPlugin):
    """Every state transition of a search trial's keys, in the order the scheduler made them."""

    name = "trial-transitions"

    def __init__(self):
        self.log = []

    def transition(self, key, start, finish, *args, **kwargs):
        if isinstance(key, tuple) and "-trial-" in str(key[0]):
            self.log.append((key, start, finish))


def _transitions(dask_scheduler):
    return dask_scheduler.plugins[TransitionLog.name].log


@pytest.fixture(scope="module")
def straggler_run():
    """ASHA with trial 0 held until another trial has passed rung 0, on 2 workers x 2 threads
    (a held thread leaves its worker a free one for the chunks it holds), with the scheduler's
    transitions of the trials' keys recorded."""
    from distributed import Client, LocalCluster

    first = candidates(ALPHAS, 9, random_state=0)[0]["alpha"]
    estimator = StragglerSGD(
        slow_alpha=first, overtaken=f"overtaken-{uuid.uuid4().hex}", n_samples=4_000, random_state=0
    )
    search = ASHASearchCV(estimator, ALPHAS, n_trials=9, max_epochs=9, refit=False, random_state=0)
    with LocalCluster(
        n_workers=2,
        threads_per_worker=2,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        memory_limit="2GiB",
    ) as cluster:
        with Client(cluster, set_as_default=True) as client:
            client.register_plugin(TransitionLog())
            search.fit(_data())
            log = client.run_on_scheduler(_transitions)
    return search, first, log


def test_asha_promotes_without_waiting_for_a_straggler(straggler_run):
    """A trial is promoted and trains on while the held trial has not finished rung 0."""
    search, slow_alpha, _ = straggler_run
    slow = search.trials_.loc[search.trials_["alpha"] == slow_alpha].iloc[0]
    assert slow["state"] != "failed", slow["error"]  # released by a promoted trial
    history = search.history_
    slow_first = next(i for i, e in enumerate(history) if e["trial"] == slow["trial"])
    assert history[slow_first]["rung"] == 0
    # A promotion needs three results at rung 0 (eta=3); the straggler's came after them all.
    assert sum(e["rung"] == 0 for e in history[:slow_first]) >= 3
    # The trials are scikit-learn's ParameterSampler's candidates with the search's seed; the
    # held one is the first.
    sampled = [c["alpha"] for c in ParameterSampler(ALPHAS, 9, random_state=0)]
    assert search.trials_["alpha"].tolist() == sampled
    assert slow_alpha == sampled[0]
    # The promoted trial's step was launched before the straggler's result arrived.
    assert any(e["rung"] >= 1 and e["started"] < history[slow_first]["time"] for e in history)
    assert search.trials_["state"].str.startswith("stopped").sum() >= 4


def test_stopped_trials_release_their_state(straggler_run):
    """A stopped trial's state leaves the scheduler's memory before any step launched after the
    stop has its result, and never comes back (the scheduler's recorded transitions)."""
    search, _, log = straggler_run
    stopped = search.trials_[search.trials_["state"].str.startswith("stopped")]
    result_at = {}  # (trial, budget) -> index of the result reaching memory
    for i, (key, _, finish) in enumerate(log):
        if "-trial-result-" in str(key[0]) and finish == "memory":
            result_at[key[1], key[2]] = i
    checked = 0
    for trial, ended in zip(stopped["trial"], stopped["time"]):
        later = [
            result_at[e["trial"], e["budget"]]
            for e in search.history_
            if e["started"] > ended and (e["trial"], e["budget"]) in result_at
        ]
        if not later:  # stopped at the end: released with the search
            continue
        arrived, gone = {}, {}
        for i, (key, start, finish) in enumerate(log):
            if ("-trial-fit-" in str(key[0]) or "-trial-step-" in str(key[0])) and key[1] == trial:
                if finish == "memory":
                    arrived[key] = i
                if start == "memory":
                    gone[key] = i
        assert arrived, trial
        for key, i in arrived.items():
            assert i < gone.get(key, len(log)) < min(later), (key, i, gone.get(key), later)
        checked += 1
    assert checked > 0


def test_a_failing_trial_is_recorded_and_the_search_completes(client):
    """A trial that raises is 'failed' with its error; the others finish and a best is found;
    the ranks follow the documented rule (budget reached, then score, failed last)."""
    failing = 1e-3
    search = ASHASearchCV(
        FailingSGD(failing_alpha=failing, random_state=0),
        ALPHAS,
        n_trials=9,
        max_epochs=3,
        random_state=0,
    )
    with pytest.warns(FitFailedWarning, match="1 of 9 trials failed"):
        search.fit(_data())
    row = search.trials_[search.trials_["alpha"] == failing].iloc[0]
    assert row["state"] == "failed"
    assert "RuntimeError: this trial fails on purpose" in row["error"]
    means = search.cv_results_["mean_test_score"]
    assert np.isnan(means[row["trial"]])
    assert search.cv_results_["rank_test_score"][row["trial"]] == 9
    # The documented ranking, computed directly: by budget reached, then score; failed trials
    # last; a trial's rank is 1 + the number of trials strictly better.
    keys = [
        (-np.inf, -np.inf) if np.isnan(score) else (budget, score)
        for budget, score in zip(search.cv_results_["budget"], means)
    ]
    expected = [1 + sum(other > key for other in keys) for key in keys]
    np.testing.assert_array_equal(search.cv_results_["rank_test_score"], expected)
    assert search.best_params_["alpha"] != failing and hasattr(search, "best_estimator_")
    # The trials are scikit-learn's ParameterSampler's candidates with the search's seed.
    sampled = [c["alpha"] for c in ParameterSampler(ALPHAS, 9, random_state=0)]
    assert search.trials_["alpha"].tolist() == sampled


def test_every_trial_failing_ends_the_search(client):
    """Every trial failing ends the search with the errors; error_score='raise' raises the first."""
    estimator = FailingSGD(failing_alpha="all")
    listing = (
        r"All 3 trials of ASHASearchCV failed.*\n"
        r"  RuntimeError: this trial fails on purpose \(alpha=.*\) \(trial 0\)\n"
    )
    with pytest.raises(ValueError, match=listing):
        ASHASearchCV(estimator, ALPHAS, n_trials=3, max_epochs=3, random_state=0).fit(_data())
    with pytest.raises(RuntimeError, match="fails on purpose"):
        ASHASearchCV(
            estimator, ALPHAS, n_trials=3, max_epochs=3, error_score="raise", random_state=0
        ).fit(_data())


@pytest.mark.parametrize(
    "make_search, budgets",
    [
        (
            lambda: SuccessiveHalvingSearchCV(
                SGDClassifier(random_state=0), ALPHAS, n_trials=9, max_epochs=9, random_state=1
            ),
            {1: 6, 3: 2, 9: 1},
        ),  # 9 trials at 1 epoch, the best 3 at 3, the best one at 9
        (
            lambda: HyperbandSearchCV(
                SGDClassifier(random_state=0),
                {"alpha": loguniform(1e-6, 1e-1)},
                max_iter=9,
                random_state=1,
            ),
            {1: 6, 3: 6, 9: 5},
        ),  # brackets 9@1 -> 3@3 -> 1@9, 5@3 -> 1@9 and 3@9 (Li et al.)
    ],
    ids=["halving", "hyperband"],
)
def test_synchronous_searches_are_reproducible(client, make_search, budgets):
    """With a seed, halving and Hyperband give the same trials, scores and best_params_; each
    trial ends at the budget the schedule, worked out by hand and by the halving arithmetic
    (Li et al.'s brackets for Hyperband), gives it."""
    data = _data()
    first, second = make_search().fit(data), make_search().fit(data)
    assert first.trials_["budget"].value_counts().to_dict() == budgets
    if isinstance(first, HyperbandSearchCV):
        expected = {}
        for n_models, first_budget in _li_brackets(9).values():
            for budget, ended in _halving_ends(n_models, first_budget, 9).items():
                expected[budget] = expected.get(budget, 0) + ended
    else:
        expected = _halving_ends(9, 1, 9)
    assert first.trials_["budget"].value_counts().to_dict() == expected
    columns = ["trial", "alpha", "budget", "score", "state"]
    assert first.trials_[columns].equals(second.trials_[columns])
    assert first.best_params_ == second.best_params_


def test_asha_samples_the_same_trials_with_a_seed(client):
    """ASHA's promotions depend on timing, its candidates do not: scikit-learn's
    ParameterSampler's with the same seed."""
    space = {"alpha": loguniform(1e-6, 1e-1)}
    runs = [
        ASHASearchCV(
            SGDClassifier(random_state=0),
            space,
            n_trials=6,
            max_epochs=3,
            refit=False,
            random_state=4,
        ).fit(_data())
        for _ in range(2)
    ]
    assert runs[0].trials_["alpha"].tolist() == runs[1].trials_["alpha"].tolist()
    expected = [c["alpha"] for c in ParameterSampler(space, 6, random_state=4)]
    assert runs[0].trials_["alpha"].tolist() == expected


def test_data_parallel_trials(client, monkeypatch):
    """With parallel=sync, the last trial standing trains with a replica per worker (once
    steps may be that short: the floor is lowered for this small data); history_ says so; the
    best model scores within 3 points of scikit-learn's SGDClassifier fitted in memory for 3
    epochs."""
    monkeypatch.setattr(_adaptive_run, "REPLICATED_MIN_SECONDS", 0.0)
    search = SuccessiveHalvingSearchCV(
        SGDClassifier(random_state=0),
        ALPHAS,
        n_trials=3,
        max_epochs=3,
        strategy="sync",
        sync_every=1,
        random_state=0,
    )
    search.fit(_data())
    replicas = {(e["rung"], e["mode"], e["replicas"]) for e in search.history_}
    assert replicas == {(0, "fused", 1), (1, "replicated", 2)}
    steps = search.trials_.set_index("state")["steps"]
    assert steps["completed"] == "fused, replicated x2"
    assert search.best_estimator_.coef_.shape == (1, 10)
    assert search.trials_["state"].tolist().count("completed") == 1
    X, y = _data().X.values, _data().y.values
    in_memory = SGDClassifier(random_state=0, max_iter=3, tol=None, **search.best_params_)
    expected = in_memory.fit(X, y).score(X, y)
    assert abs(search.best_estimator_.score(X, y) - expected) <= 0.03, expected


@pytest.mark.parametrize("scoring", [None, make_scorer(accuracy_score)])
def test_fused_steps_equal_chains(client, monkeypatch, scoring):
    """A step fused into one task over the chunks held on its worker trains and scores exactly
    as the chain of per-chunk tasks does (same states, same scores, same best model), and both
    as the halving worked out here with scikit-learn in memory (cv = 3 chunks, one held out
    per fold, the chunks in order). Without room for a copy of the data on every worker, steps
    are chains."""
    data = _data(n_samples=1_200, chunk_size=400)

    def run():
        return SuccessiveHalvingSearchCV(
            SGDClassifier(random_state=0),
            ALPHAS,
            n_trials=6,
            max_epochs=9,
            scoring=scoring,
            cv=3,
            shuffle=False,
            random_state=0,
        ).fit(data)

    fused = run()
    monkeypatch.setattr(_adaptive_run, "HELD_MEMORY_SHARE", 0.0)
    chained = run()
    assert {e["mode"] for e in fused.history_} == {"fused"}
    assert {e["mode"] for e in chained.history_} == {"chain"}
    decisions = [
        [(e["trial"], e["budget"], e["score"]) for e in sorted(s.history_, key=_order)]
        for s in (fused, chained)
    ]
    assert decisions[0] == decisions[1]
    np.testing.assert_array_equal(fused.best_estimator_.coef_, chained.best_estimator_.coef_)
    expected = _reference_halving(data, 6, 9)
    for decided in decisions:
        np.testing.assert_allclose(np.array(decided, dtype=float), np.array(expected))


def _order(event):
    return event["trial"], event["budget"]


def test_chunked_and_gathered_scoring_agree(client):
    """'accuracy' scored chunk-wise by taskdml.metrics equals the scorer on gathered chunks,
    and both equal scikit-learn's accuracy of each trial trained in memory (one chunk held out
    per fold, cv = 3 chunks, the chunks in order)."""
    data = _data(n_samples=1_200, chunk_size=400)
    scores = [
        SuccessiveHalvingSearchCV(
            SGDClassifier(random_state=0),
            ALPHAS,
            n_trials=4,
            max_epochs=3,
            scoring=scoring,
            cv=3,
            shuffle=False,
            refit=False,
            random_state=0,
        )
        .fit(data)
        .cv_results_
        for scoring in ("accuracy", make_scorer(accuracy_score))
    ]
    np.testing.assert_allclose(scores[0]["mean_test_score"], scores[1]["mean_test_score"])
    last = {trial: (epochs, score) for trial, epochs, score in _reference_halving(data, 4, 3)}
    expected = np.array([last[trial] for trial in range(4)])
    for results in scores:
        np.testing.assert_array_equal(results["budget"], expected[:, 0])
        np.testing.assert_allclose(results["mean_test_score"], expected[:, 1])


def test_cv_scores_every_fold(client):
    """cv=3: three fold states per trial; the trial's score is their mean. On three chunks each
    fold holds out one: its score is scikit-learn's of the trial trained in memory on the two
    others for the budget it reached (without shuffle, the chunks in order)."""
    data = _data(n_samples=1_200, chunk_size=400)
    search = ASHASearchCV(
        SGDClassifier(random_state=0),
        ALPHAS,
        n_trials=4,
        max_epochs=3,
        cv=3,
        shuffle=False,
        random_state=0,
    ).fit(data)
    results = search.cv_results_
    splits = np.column_stack([results[f"split{k}_test_score"] for k in range(3)])
    np.testing.assert_allclose(splits.mean(axis=1), results["mean_test_score"])
    assert search.n_splits_ == 3
    # ASHA's promotions depend on arrival order, so the reference is every sampled trial at
    # every rung (1 and 3 epochs): what each trial reached must be one of them.
    reached = {
        (params["alpha"], budget): tuple(scores)
        for params, budget, scores in zip(results["params"], results["budget"], np.sort(splits))
    }
    expected = {
        (candidate["alpha"], epochs): tuple(_fold_scores(data, candidate["alpha"], epochs))
        for candidate in ParameterSampler(ALPHAS, 4, random_state=0)
        for epochs in (1, 3)
    }
    assert reached.items() <= expected.items()
    assert len(reached) == 4


def test_fit_only_estimators_grow_their_subsample(client):
    """Without partial_fit the budget is a number of samples, refitted on a growing subsample;
    the best model (fitted on a third of the rows) scores within 2 points of scikit-learn's
    LogisticRegression fitted in memory on all of them."""
    search = ASHASearchCV(
        LogisticRegression(), {"C": loguniform(1e-3, 1e2)}, n_trials=3, max_epochs=9, random_state=0
    ).fit(_data())
    completed = [e for e in search.history_ if e["trial"] == search.best_index_]
    assert [e["budget"] for e in completed] == [1, 3]
    assert completed[0]["n_samples"] < completed[1]["n_samples"] < 4_000
    X, y = _data().X.values, _data().y.values
    expected = LogisticRegression(**search.best_params_).fit(X, y).score(X, y)
    assert abs(search.best_estimator_.score(X, y) - expected) <= 0.02, expected


@pytest.mark.parametrize("kind", ["numpy", "dask", "dataarray", "dataset"])
def test_inputs(client, kind):
    """NumPy, dask, xarray DataArray and Dataset inputs; predict keeps dask input lazy; the
    score is scikit-learn's accuracy of the best model, within 3 points of scikit-learn's
    SGDClassifier fitted in memory for 3 epochs."""
    data = _data(n_samples=2_000, chunk_size=250)
    X, y = {
        "numpy": (data.X.values, data.y.values),
        "dask": (data.X.data, data.y.data),
        "dataarray": (data.X, data.y),
        "dataset": (data, None),
    }[kind]
    search = ASHASearchCV(
        SGDClassifier(random_state=0), ALPHAS, n_trials=3, max_epochs=3, random_state=0
    ).fit(X, y)
    predicted = search.predict(data.X.data)
    assert isinstance(predicted, da.Array) and predicted.compute().shape == (2_000,)
    X_np, y_np = data.X.values, data.y.values
    score = search.score(data)
    assert score == pytest.approx(accuracy_score(y_np, search.best_estimator_.predict(X_np)))
    in_memory = SGDClassifier(random_state=0, max_iter=3, tol=None, **search.best_params_)
    expected = in_memory.fit(X_np, y_np).score(X_np, y_np)
    assert abs(score - expected) <= 0.03, (score, expected)


# --------------------------------------------------------------------------------------------
# The estimator contract, in process.


_SMALL = {"alpha": [1e-4, 1e-3, 1e-2]}


@parametrize_with_checks(
    [
        ASHASearchCV(
            SGDClassifier(random_state=0), _SMALL, n_trials=3, max_epochs=3, random_state=0
        ),
        SuccessiveHalvingSearchCV(
            SGDRegressor(random_state=0), _SMALL, n_trials=3, max_epochs=3, random_state=0
        ),
        HyperbandSearchCV(SGDClassifier(random_state=0), _SMALL, max_iter=3, random_state=0),
    ]
)
def test_scikit_learn_estimator_checks(estimator, check):
    """The searches pass scikit-learn's estimator checks (in process, no client)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The total space of parameters", UserWarning)
        check(estimator)


def _tiny():
    return sk_make_classification(60, 4, random_state=0)


@pytest.mark.parametrize(
    "search, message",
    [
        (
            ASHASearchCV(SGDClassifier(), _SMALL, n_trials=0),
            r"n_trials must be an integer >= 1, got 0",
        ),
        (
            ASHASearchCV(SGDClassifier(), _SMALL, min_epochs=5, max_epochs=3),
            r"min_epochs \(5\) must not exceed max_epochs \(3\)",
        ),
        (
            ASHASearchCV(SGDClassifier(), _SMALL, reduction_factor=1),
            r"reduction_factor must be an integer >= 2",
        ),
        (
            ASHASearchCV(SGDClassifier(), _SMALL, validation_fraction=1.5),
            r"validation_fraction must be a number in \(0, 1\), got 1.5",
        ),
        (
            ASHASearchCV(SGDClassifier(), _SMALL, cv=1),
            r"cv must be None .* or an integer >= 2 .*, got 1",
        ),
        (
            ASHASearchCV(SGDClassifier(), _SMALL, strategy="synk"),
            r"ASHASearchCV: strategy must be one of 'sync', 'async', 'sequential'; got 'synk'. "
            r"Did you mean 'sync'\?",
        ),
        (
            HyperbandSearchCV(SGDClassifier(), _SMALL, staleness=-1),
            r"HyperbandSearchCV: staleness must be an integer >= 0 or None; got -1",
        ),
        (
            ASHASearchCV(SGDClassifier(), _SMALL, refit="again"),
            r"refit must be True \(continue the best trial\), 'continue', 'full' \(retrain "
            r"from scratch\) or False, got 'again'",
        ),
        (
            ASHASearchCV(SGDClassifier(), _SMALL, error_score="ignore"),
            r"error_score must be 'raise' or a number",
        ),
        (
            ASHASearchCV(SGDClassifier(), _SMALL, scoring=["accuracy", "f1"]),
            r"scoring must be None, a scorer name",
        ),
        (
            SuccessiveHalvingSearchCV(SGDClassifier(), _SMALL, patience=0),
            r"patience must be True, False or an integer",
        ),
        (
            SuccessiveHalvingSearchCV(SGDClassifier(), _SMALL, tol=-1),
            r"tol must be a number >= 0, got -1",
        ),
        (
            HyperbandSearchCV(SGDClassifier(), _SMALL, aggressiveness=2.5),
            r"aggressiveness must be an integer >= 2",
        ),
        (
            HyperbandSearchCV(SGDClassifier(), _SMALL, max_iter=0),
            r"max_iter must be an integer >= 1, got 0",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else type(value).__name__,
)
def test_parameter_errors_name_the_parameter(search, message):
    """Bad parameters fail at fit with a message that names the parameter and the value."""
    with pytest.raises(ValueError, match=message):
        search.fit(*_tiny())


@pytest.mark.parametrize(
    "parallel, message",
    [
        ({"strategi": "sync"}, r"unknown key 'strategi' in parallel. Did you mean 'strategy'\?"),
        ({"strategy": "synk"}, r"strategy must be one of 'sync', 'async', 'sequential'; got"),
        ("sync", r"parallel must be None or a dict"),
        ({"epochs": 3}, r"parallel\['epochs'\] does not apply to a search: the budget sets .* "
         r"\(max_epochs\); remove it"),
    ],
)  # fmt: skip
def test_the_deprecated_parallel_dict_is_still_checked(parallel, message):
    """parallel= (deprecated since 0.2) warns, and its mistakes are named as before."""
    search = HyperbandSearchCV(SGDClassifier(), _SMALL, parallel=parallel)
    with pytest.warns(FutureWarning, match="parallel=...\\) is deprecated"):
        with pytest.raises(ValueError, match=message):
            search.fit(*_tiny())


def test_refit_false_has_no_best_estimator():
    """refit=False: the search keeps its results but cannot predict, and says why."""
    search = ASHASearchCV(
        SGDClassifier(random_state=0), _SMALL, n_trials=3, max_epochs=3, refit=False, random_state=0
    ).fit(*_tiny())
    assert not hasattr(search, "best_estimator_") and search.best_params_
    assert search.cv_results_["params"] == list(ParameterSampler(_SMALL, 3, random_state=0))
    with pytest.raises(
        AttributeError, match="initialized with refit=False. predict is available only"
    ):
        search.predict(_tiny()[0])


def test_patience_stops_a_plateau():
    """A trial whose score stops improving is stopped before its rung's budget. With eta0=1e-9
    no trial learns, so every score is equal: trial 0 wins the tie at rung 0 (budgets 1, 3, 9),
    trains to 1 + patience = 3 epochs, and dask-ml's rule (no gain above tol over the last
    patience epochs) stops it there."""
    search = SuccessiveHalvingSearchCV(
        SGDClassifier(random_state=0, learning_rate="constant", eta0=1e-9),
        _SMALL,
        n_trials=3,
        max_epochs=9,
        patience=2,
        tol=1e-3,
        random_state=0,
    ).fit(*_tiny())
    assert len({entry["score"] for entry in search.history_}) == 1
    assert search.trials_["budget"].tolist() == [3, 1, 1]
    assert search.trials_["state"].tolist() == [
        "stopped at rung 1 (plateau)",
        "stopped at rung 0",
        "stopped at rung 0",
    ]


# --------------------------------------------------------------------------------------------
# The refit, and dask-ml's records.


@pytest.mark.parametrize(
    "refit, method, epochs_over_all",
    [(True, "continued", 1), ("continue", "continued", 1), ("full", "full", 9)],
)
def test_refit_continues_the_best_trial_or_starts_over(refit, method, epochs_over_all):
    """metadata_ says how the refit ran. Continued: the best trial's state (9 epochs on the
    training chunks) plus one epoch on every chunk, as SGD's sample counter t_ shows; full: 9
    epochs on every chunk from scratch. Either scores within 2 points of the other."""
    X, y = sk_make_classification(3_000, 10, n_informative=4, random_state=0)
    X_test, y_test = X[2_000:], y[2_000:]
    searches = {
        name: SuccessiveHalvingSearchCV(
            SGDClassifier(random_state=0),
            ALPHAS,
            n_trials=9,
            max_epochs=9,
            random_state=0,
            refit=value,
        ).fit(X[:2_000], y[:2_000])
        for name, value in (("ours", refit), ("other", "full" if method == "continued" else True))
    }
    search = searches["ours"]
    assert search.metadata_["refit"] == method
    assert search.metadata_["refit_epochs"] == epochs_over_all
    assert search.n_iter_ == 9 and search.refit_time_ > 0
    n_train = 1_600  # 10 chunks of 200 rows, 2 held out for validation
    seen = 9 * n_train + 2_000 if method == "continued" else 9 * 2_000
    assert search.best_estimator_.t_ == seen + 1
    ours, other = (s.best_estimator_.score(X_test, y_test) for s in searches.values())
    assert abs(ours - other) <= 0.02, (ours, other)


def test_refit_without_partial_fit_is_full_and_no_refit_says_so():
    """An estimator with only fit has no state to continue: the refit is full, scikit-learn's
    fit with the best parameters on all the rows; refit=False records None."""
    search = ASHASearchCV(
        LogisticRegression(), {"C": [0.1, 1.0, 10.0]}, n_trials=3, max_epochs=3, random_state=0
    ).fit(*_tiny())
    assert (search.metadata_["refit"], search.metadata_["refit_epochs"]) == ("full", None)
    expected = LogisticRegression(**search.best_params_).fit(*_tiny())
    np.testing.assert_allclose(search.best_estimator_.coef_, expected.coef_)
    np.testing.assert_allclose(search.best_estimator_.intercept_, expected.intercept_)
    search = ASHASearchCV(
        SGDClassifier(random_state=0), _SMALL, n_trials=3, max_epochs=3, refit=False, random_state=0
    ).fit(*_tiny())
    assert (search.metadata_["refit"], search.metadata_["refit_epochs"]) == (None, 0)


DASK_ML_RECORD = {
    "model_id",
    "params",
    "partial_fit_calls",
    "partial_fit_time",
    "score",
    "score_time",
    "elapsed_wall_time",
}


@pytest.mark.parametrize(
    "make_search, with_bracket",
    [
        (
            lambda: HyperbandSearchCV(
                SGDClassifier(random_state=0),
                {"alpha": loguniform(1e-6, 1e-1)},
                max_iter=9,
                random_state=1,
            ),
            True,
        ),
        (
            lambda: ASHASearchCV(
                SGDClassifier(random_state=0), ALPHAS, n_trials=6, max_epochs=9, random_state=0
            ),
            False,
        ),
    ],
    ids=["hyperband", "asha"],
)
def test_model_history_has_dask_mls_structure(client, make_search, with_bracket):
    """model_history_ is dask-ml's: {model_id: [record per score]} with dask-ml's fields (and
    bracket for Hyperband); its records are history_'s, grouped; cv_results_ has model_id and
    partial_fit_calls, so dask-ml's idiom model_history_[cv_results_["model_id"][best_index_]]
    reads the best trial's curve."""
    search = make_search().fit(_data())
    history = search.model_history_
    expected_keys = DASK_ML_RECORD | ({"bracket"} if with_bracket else set())
    assert sorted(map(str, history)) == sorted(map(str, search.cv_results_["model_id"]))
    assert len(history) == search.n_trials_
    for model_id, records in history.items():
        for record in records:
            assert set(record) == expected_keys
            assert record["model_id"] == model_id
            assert record["partial_fit_time"] >= 0 and np.isnan(record["score_time"])
        calls = [record["partial_fit_calls"] for record in records]
        assert calls == sorted(calls)
        walls = [record["elapsed_wall_time"] for record in records]
        assert walls == sorted(walls)
    if with_bracket:
        assert all(str(model_id).startswith("bracket=") for model_id in history)
        first = search.trials_.iloc[0]
        assert history[f"bracket={first['bracket']}-0"][0]["params"] == first["params"]
        # Li et al.'s brackets for max_iter=9: as many models as they start.
        assert len(history) == sum(n_models for n_models, _ in _li_brackets(9).values())
    else:
        assert sorted(history) == list(range(6))
        # Model i is scikit-learn's ParameterSampler's candidate i for the search's seed.
        sampled = list(ParameterSampler(ALPHAS, 6, random_state=0))
        assert [history[i][0]["params"] for i in range(6)] == sampled
    best = history[search.cv_results_["model_id"][search.best_index_]]
    assert best[-1]["partial_fit_calls"] == search.n_iter_
    assert best[-1]["score"] == pytest.approx(search.best_score_)
    np.testing.assert_array_equal(
        search.cv_results_["partial_fit_calls"], search.cv_results_["budget"]
    )

    def order(record):
        return str(record["model_id"]), record["elapsed_wall_time"]

    grouped = [{key: event[key] for key in expected_keys} for event in search.history_]
    assert sorted(grouped, key=order) == sorted(
        (record for records in history.values() for record in records), key=order
    )
