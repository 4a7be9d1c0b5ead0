"""The automatic sync period: the policy by hand, and its decisions in real trainings."""

import math
import time

import dask.array as da
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.linear_model import SGDClassifier

from taskdml import DataParallel
from taskdml.parallel import get_merge_rule, register_merge, train
from taskdml.parallel.engine._period import (
    MIN_ROUNDS,
    PROBE_ROUNDS,
    TARGET,
    check_sync_every,
    choose_period,
    estimates,
)

# The policy's constants as the module docstring states them: coordination at most 5 % of a
# round's wall time, at least 4 merges an epoch.
DOCUMENTED_TARGET = 0.05
DOCUMENTED_MIN_ROUNDS = 4


def _documented_period(block_s, round_s, most_blocks):
    """The period by the formula of _period.py's docstring, written here: the smallest ``p``
    with ``round_s / (p * block_s + round_s) <= 5 %``, found by trying p = 1, 2, ..., up to
    the longest period that keeps 4 merges an epoch (1 when a measurement is missing)."""
    bound = max(1, (most_blocks - 1) // (DOCUMENTED_MIN_ROUNDS - 1))
    if block_s is None or round_s is None:
        return 1
    for period in range(1, bound + 1):
        wall = period * block_s + round_s
        # a relative whisker: the hand-computed 5 % cases land on the target exactly
        if round_s <= DOCUMENTED_TARGET * wall * (1 + 1e-9):
            return period
    return bound


@pytest.mark.parametrize(
    ("block_s", "round_s", "most_blocks", "period"),
    [
        (0.007, 0.004, 1_000, 11),  # 19 * 4 / 7 = 10.9: the actor's round on the benchmark
        (0.007, 0.004, 10, 3),  # the same, 10 blocks an epoch: 4 merges allow 3 a round
        (0.007, 0.0005, 100, 2),  # a 0.5 ms collective: 1.36
        (0.007, 0.001, 100, 3),  # 1 ms: 2.71
        (0.001, 0.004, 400, 76),  # cheap blocks, expensive rounds: 76 exactly
        (0.019, 0.001, 100, 1),  # exactly 5 % at period 1
        (0.010, 0.0, 100, 1),  # free rounds
        (0.0, 0.004, 100, 33),  # free blocks: the bound, (100 - 1) // 3
        (0.001, 1.0, 4, 1),  # an epoch of MIN_ROUNDS blocks merges after each
        (0.001, 1.0, 7, 2),  # 7 blocks: ceil(7 / 2) = 4 merges
        (None, 0.004, 100, 1),  # not measured: merge after every block
        (0.007, None, 100, 1),
    ],
)
def test_choose_period_by_hand(block_s, round_s, most_blocks, period):
    """The formula and its bound give the hand-computed period, and the documented formula
    computed in the test gives it too (with the docstring's 5 % and 4 merges)."""
    assert (TARGET, MIN_ROUNDS) == (DOCUMENTED_TARGET, DOCUMENTED_MIN_ROUNDS)
    assert choose_period(block_s, round_s, most_blocks) == period
    assert choose_period(block_s, round_s, most_blocks) == _documented_period(
        block_s, round_s, most_blocks
    )


@given(
    st.floats(1e-5, 1.0),
    st.floats(0.0, 1.0),
    st.integers(1, 10_000),
)
def test_choose_period_is_the_smallest_within_target_and_the_bound(block_s, round_s, blocks):
    """The period keeps coordination within the target (or is the bound), the one before it
    does not, and every epoch keeps MIN_ROUNDS merges (or merges after every block)."""
    period = choose_period(block_s, round_s, blocks)
    share = lambda p: round_s / (p * block_s + round_s) if round_s else 0.0  # noqa: E731
    bound = max(1, (blocks - 1) // (MIN_ROUNDS - 1))
    assert 1 <= period <= bound
    assert period == bound or share(period) <= TARGET * (1 + 1e-6)
    assert period == 1 or share(period - 1) > TARGET * (1 - 1e-6)
    assert period == 1 or math.ceil(blocks / period) >= MIN_ROUNDS


def test_estimates_take_the_slowest_block_and_the_last_arrival():
    """Seconds per block: the slowest replica's, median over rounds; round cost: the smallest
    overhead of a round (the last arrival's), median over rounds; unknowns left out."""
    rounds = [
        [(0.010, 1, None), (0.030, 1, None)],  # first round: no overhead known yet
        [(0.010, 1, 0.050), (0.012, 1, 0.004)],
        [(0.020, 2, 0.006), (0.0, 0, 0.090)],  # rank 1 had no block left
        [(0.009, 1, 0.008), (0.011, 1, 0.002)],
    ]
    assert estimates(rounds) == pytest.approx((0.0115, 0.004))
    assert estimates([[(0.01, 1, None)]]) == (0.01, None)
    # the same estimates, computed here from the docstring's definition with NumPy
    slowest = [
        np.max([seconds / blocks for seconds, blocks, _ in infos if blocks]) for infos in rounds
    ]
    last_arrival = [
        np.min(known)
        for known in ([o for _, _, o in infos if o is not None] for infos in rounds)
        if known
    ]
    assert estimates(rounds) == pytest.approx((np.median(slowest), np.median(last_arrival)))


@pytest.mark.parametrize("value", [0, -1, 2.0, "2", True, "Auto", None])
def test_bad_sync_every_is_refused_with_what_is_allowed(value):
    """train and DataParallel refuse anything but an integer >= 1 or "auto", and say so."""
    message = "sync_every must be an integer >= 1 .* or 'auto' .*; got "
    with pytest.raises(ValueError, match=message):
        check_sync_every(value)
    X = da.zeros((40, 2), chunks=20)
    with pytest.raises(ValueError, match=message):
        train(SGDClassifier(), X, da.zeros(40, chunks=20), sync_every=value, client=False)
    with pytest.raises(ValueError, match="DataParallel: " + message):
        DataParallel(SGDClassifier(), sync_every=value).fit(np.zeros((40, 2)), np.zeros(40))


# Estimators whose costs "auto" measures. A sleep gives a block or a round a cost of at least
# its length on any machine: the recorded inputs must show it. How much more the rest costs
# depends on the machine, so which period follows is checked against the recorded inputs,
# never against the sleeps.
BLOCK_SLEEP_S = 0.02
MERGE_SLEEP_S = 0.01


class SlowSGD(SGDClassifier):
    """An SGD classifier whose partial_fit takes BLOCK_SLEEP_S more: expensive blocks."""

    def partial_fit(self, X, y=None, classes=None, sample_weight=None):
        time.sleep(BLOCK_SLEEP_S)
        return super().partial_fit(X, y, classes=classes, sample_weight=sample_weight)


class SlowMergeSGD(SGDClassifier):
    """An SGD classifier whose merge takes MERGE_SLEEP_S more: expensive rounds."""


def _slow_merge(replicas, weights):
    time.sleep(MERGE_SLEEP_S)
    return get_merge_rule(SGDClassifier()).fn(replicas, weights)


def _register_slow_merge():
    linear = get_merge_rule(SGDClassifier())
    register_merge(
        SlowMergeSGD,
        _slow_merge,
        prepare=linear.prepare,
        family="slow-merge",
        private_state=linear.private_state,
        start_state=linear.start_state,
    )


def _tiny_chunks(n_chunks=51, rows=40):
    """Many tiny chunks: 26 and 25 blocks for two replicas."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n_chunks * rows, 4))
    y = (X[:, 0] + 0.3 * rng.normal(size=len(X)) > 0).astype(int)
    return da.from_array(X, chunks=(rows, 4)), da.from_array(y, chunks=rows)


def _check_decisions(result, epochs):
    """Each epoch's period is the policy applied to its recorded inputs, and the rounds are
    the real ones: probe rounds of period 1 first, then the period."""
    stats, history = result.stats, result.history
    most = -(-stats["blocks"] // stats["replicas"])
    assert len(history) == epochs
    assert stats["sync_every"] == [entry["sync_every"] for entry in history]
    rounds = 0
    for index, entry in enumerate(history):
        assert entry["block_s"] > 0 and entry["round_s"] >= 0
        assert entry["sync_every"] == choose_period(entry["block_s"], entry["round_s"], most)
        # and the documented formula, computed here from the recorded inputs
        assert entry["sync_every"] == _documented_period(entry["block_s"], entry["round_s"], most)
        assert stats["block_s"][index] == entry["block_s"]
        assert stats["round_s"][index] == entry["round_s"]
        probe = PROBE_ROUNDS if index == 0 else 0
        expected = probe + math.ceil((most - probe) / entry["sync_every"])
        assert entry["rounds"] == expected
        rounds += expected
    assert stats["rounds"] == rounds
    return [entry["sync_every"] for entry in history]


@pytest.mark.parametrize("use_client", [True, False], ids=["cluster", "threads"])
def test_auto_periods_are_the_policy_applied_to_the_measured_costs(request, use_client):
    """With expensive rounds, then expensive blocks, every epoch's period is the policy
    applied to the inputs recorded with it, and those inputs include the extra cost (a
    round at least MERGE_SLEEP_S, a block at least BLOCK_SLEEP_S). The models are the sync
    loop of reference_loops.py run with the recorded periods (the sleeps change no
    arithmetic: scikit-learn's SGD and the linear rule)."""
    from reference_loops import chunks_of, merge_linear_sgd, reference_sync_windows

    client = request.getfixturevalue("client") if use_client else False
    _register_slow_merge()
    X, y = _tiny_chunks()
    options = dict(classes=[0, 1], epochs=2, n_replicas=2, random_state=0, client=client)
    costly_rounds = train(SlowMergeSGD(random_state=0), X, y, **options)
    costly_blocks = train(SlowSGD(random_state=0), X, y, **options)
    assert costly_rounds.strategy == costly_blocks.strategy == "sync"
    _check_decisions(costly_rounds, epochs=2)
    _check_decisions(costly_blocks, epochs=2)
    assert min(entry["round_s"] for entry in costly_rounds.history) >= MERGE_SLEEP_S
    assert min(entry["block_s"] for entry in costly_blocks.history) >= BLOCK_SLEEP_S
    chunks = chunks_of(X.compute(), y.compute(), X.chunks[0])
    most = -(-len(chunks) // 2)
    for result in (costly_rounds, costly_blocks):
        periods = [entry["sync_every"] for entry in result.history]
        windows = [
            [1] * PROBE_ROUNDS + [periods[0]] * math.ceil((most - PROBE_ROUNDS) / periods[0]),
            [periods[1]] * math.ceil(most / periods[1]),
        ]
        expected = reference_sync_windows(
            SGDClassifier(random_state=0), chunks, [0, 1], merge_linear_sgd, n_replicas=2,
            windows=windows, shuffle=True, random_state=0,
        )  # fmt: skip
        np.testing.assert_array_equal(result.estimator.coef_, expected.coef_)
        np.testing.assert_array_equal(result.estimator.intercept_, expected.intercept_)


def test_an_explicit_period_records_itself_and_measures_nothing(client):
    """An integer is the period of every round: recorded, with the rounds it makes, and the
    rounds of the sync loop of reference_loops.py with that period."""
    from reference_loops import chunks_of, merge_linear_sgd, reference_sync

    X, y = _tiny_chunks()
    options = dict(epochs=2, sync_every=4, n_replicas=2, random_state=0)
    result = train(SGDClassifier(random_state=0), X, y, classes=[0, 1], **options)
    expected = reference_sync(
        SGDClassifier(random_state=0), chunks_of(X.compute(), y.compute(), X.chunks[0]),
        [0, 1], merge_linear_sgd, shuffle=True, **options,
    )  # fmt: skip
    np.testing.assert_array_equal(result.estimator.coef_, expected.coef_)
    assert result.stats["sync_every"] == 4
    assert [entry["sync_every"] for entry in result.history] == [4, 4]
    assert [entry["rounds"] for entry in result.history] == [7, 7]  # ceil(26 / 4)
    assert result.stats["rounds"] == 14
    assert "block_s" not in result.stats and "block_s" not in result.history[0]


def test_async_and_sequential_ignore_the_period(client):
    """Neither strategy merges in rounds: no period in their history; the models are the
    replay of the recorded pushes and the serial loop (reference_loops.py)."""
    from reference_loops import (
        chunks_of,
        engine_seed,
        merge_linear_sgd,
        reference_sync,
        replay_async,
    )

    X, y = _tiny_chunks(n_chunks=8)
    chunks = chunks_of(X.compute(), y.compute(), X.chunks[0])
    for strategy in ("async", "sequential"):
        result = train(
            SGDClassifier(random_state=0), X, y, classes=[0, 1], strategy=strategy, random_state=0
        )
        assert "sync_every" not in result.history[0] and "sync_every" not in result.stats
        if strategy == "async":
            expected = replay_async(
                SGDClassifier(random_state=0), chunks, [0, 1], merge_linear_sgd,
                [tuple(push) for push in result.stats["pushes"]], n_replicas=2, epochs=1,
                shuffle=True, seed=engine_seed(0),
            )  # fmt: skip
        else:
            expected = reference_sync(
                SGDClassifier(random_state=0), chunks, [0, 1], merge_linear_sgd, n_replicas=1,
                sync_every=1, epochs=1, shuffle=True, random_state=0,
            )  # fmt: skip
        np.testing.assert_array_equal(result.estimator.coef_, expected.coef_)


@pytest.mark.parametrize("sync_every", ["auto", 2])
def test_data_parallel_keeps_the_periods_in_history(client, sync_every):
    """DataParallel's history_ has each epoch's period (and, with "auto", its inputs);
    partial_fit appends the next call's. With an integer period the fit is the sync loop of
    reference_loops.py (with the engine seed DataParallel draws from its random_state)."""
    from reference_loops import chunks_of, engine_seed, merge_linear_sgd, reference_sync

    X, y = _tiny_chunks()
    model = DataParallel(
        SGDClassifier(random_state=0), epochs=2, sync_every=sync_every, random_state=0
    )
    model.fit(X, y)
    if sync_every != "auto":
        expected = reference_sync(
            SGDClassifier(random_state=0), chunks_of(X.compute(), y.compute(), X.chunks[0]),
            [0, 1], merge_linear_sgd, n_replicas=2, sync_every=sync_every, epochs=2,
            shuffle=True, random_state=engine_seed(0),
        )  # fmt: skip
        np.testing.assert_array_equal(model.estimator_.coef_, expected.coef_)
    model.partial_fit(X, y)
    assert len(model.history_) == 3
    for entry in model.history_:
        assert entry["sync_every"] >= 1
        assert ("block_s" in entry) == (sync_every == "auto")
        if sync_every == "auto":
            assert entry["sync_every"] == choose_period(entry["block_s"], entry["round_s"], 26)
            assert entry["sync_every"] == _documented_period(entry["block_s"], entry["round_s"], 26)
        else:
            assert entry["sync_every"] == 2
