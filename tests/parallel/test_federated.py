"""Federated training: silos pinned to their workers, FedAvg (against a loop written here, on
silos of unequal sizes), secure aggregation, DP."""

import copy
import subprocess
import sys

import cloudpickle
import numpy as np
import pytest
from dask.sizeof import sizeof
from distributed import Client, Nanny, Scheduler, SpecCluster, WorkerPlugin, get_task_stream
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier, SGDRegressor
from sklearn.neural_network import MLPClassifier

from taskdml.parallel import DifferentialPrivacy, Silo, dp_epsilon, train_federated
from taskdml.parallel.federated import _privacy as privacy

# The loaders and the plugin below run in the workers' processes, which cannot import a test
# module: ship them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SILOS = ("silo_a", "silo_b", "silo_c")
DIGITS = load_digits()
HELD_OUT = slice(1500, None)


def digits(labels=None, chunk=100, rows=slice(0, 1500)):
    """Rows of the digits data (scaled to [0, 1]) whose label is in *labels*, in chunks."""
    X, y = DIGITS.data[rows] / 16.0, DIGITS.target[rows]
    if labels is not None:
        keep = np.isin(y, labels)
        X, y = X[keep], y[keep]
    return [(X[i : i + chunk], y[i : i + chunk]) for i in range(0, len(X), chunk)]


class StoredKeys(WorkerPlugin):
    """Records every key that reaches a worker's memory (computed there or fetched), and the
    size of its value."""

    name = "stored-keys"

    def setup(self, worker):
        self.worker, self.sizes = worker, {}

    def transition(self, key, start, finish, **kwargs):
        if finish == "memory":
            value = self.worker.data[key] if key in self.worker.data else None
            self.sizes[key] = max(self.sizes.get(key, 0), sizeof(value))


def stored_keys(dask_worker):
    return {repr(k): size for k, size in dask_worker.plugins["stored-keys"].sizes.items()}


@pytest.fixture(scope="module")
def client():
    """Three worker processes, each the one worker of a silo: silo_a and silo_b by a Dask
    resource of their name, silo_c by its worker name."""
    options = {"nthreads": 1, "host": "127.0.0.1", "memory_limit": "1GiB"}
    workers = {
        name: {"cls": Nanny, "options": {**options, "resources": {name: 1}}} for name in SILOS
    }
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard_address": ":0"}}
    with (
        SpecCluster(workers=workers, scheduler=scheduler) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(3)
        yield client


def silos(labels=(None, None, None), **kwargs):
    return [
        Silo("silo_a", digits, {"labels": labels[0], **kwargs}, resources={"silo_a": 1}),
        Silo("silo_b", digits, {"labels": labels[1], **kwargs}, resources={"silo_b": 1}),
        Silo("silo_c", digits, {"labels": labels[2], **kwargs}, workers=["silo_c"]),
    ]


def test_chunks_never_leave_their_silo(client):
    """Every task of a silo runs on its worker, no worker fetches anything from another, and
    no worker ever stores a key of another silo; the keys hold handles, not the chunks, so
    nothing Dask does with keys (retire_workers, rebalance) can move the data. The model is
    FedAvg by rows written in the test, to the masks' fixed-point rounding."""
    client.register_plugin(StoredKeys())
    with get_task_stream(client) as stream:
        result = train_federated(
            SGDClassifier(random_state=0),
            silos(labels=([0, 1, 2, 3], [4, 5, 6], [7, 8, 9])),
            rounds=3,
            local_epochs=2,
            secure_aggregation=True,
            client=client,
        )
    silo_of = {a: name for name, addresses in result.workers.items() for a in addresses}
    assert sorted(silo_of.values()) == sorted(SILOS)
    names = dict(enumerate(SILOS))
    ours = [t for t in stream.data if isinstance(t["key"], tuple) and "federated" in t["key"][0]]
    phases = {t["key"][0].split("-")[1] for t in ours}
    assert phases == {"load", "labels", "prepare", "keys", "round", "drop"}
    for task in ours:
        assert silo_of[task["worker"]] == names[task["key"][-1]], task["key"]
        assert [s for s in task["startstops"] if s["action"] == "transfer"] == []
    for address, sizes in client.run(stored_keys).items():
        federated = {k: size for k, size in sizes.items() if "federated" in k}
        index = SILOS.index(silo_of[address])
        assert {k.endswith(f", {index})") for k in federated} == {True}, (address, federated)
        loads = [size for k, size in federated.items() if "federated-load" in k]
        assert len(loads) == 1 and loads[0] < 1_000  # its chunks: hundreds of kB
    client.unregister_worker_plugin("stored-keys")
    labels = ([0, 1, 2, 3], [4, 5, 6], [7, 8, 9])
    expected = fedavg([digits(labels=kept) for kept in labels], 3, 2, np.arange(10))
    np.testing.assert_allclose(result.estimator.coef_, expected.coef_, rtol=0, atol=1e-6)
    np.testing.assert_allclose(result.estimator.intercept_, expected.intercept_, atol=1e-6)


def test_masks_cancel_exactly():
    """The masked updates add up to the sum of the clear ones, exactly in fixed point, while
    one masked update is noise far larger than the update itself."""
    rng = np.random.default_rng(0)
    updates = [rng.normal(scale=10.0, size=257) for _ in range(4)]
    pairs = [privacy.make_key_pair() for _ in updates]
    public = [privacy.public_key(p) for p in pairs]
    masked = [
        privacy.mask(privacy.encode(u), i, pairs[i], public, ("call", 3))
        for i, u in enumerate(updates)
    ]
    clear = sum(privacy.encode(u) for u in updates)
    masked_sum = sum(masked)
    np.testing.assert_array_equal(masked_sum, clear)
    np.testing.assert_allclose(privacy.aggregate(masked), np.sum(updates, axis=0), atol=1e-6)
    alone = privacy.decode(masked[0])
    assert np.median(np.abs(alone - updates[0])) > 1e6 * np.abs(updates[0]).max()
    again = privacy.mask(privacy.encode(updates[0]), 0, pairs[0], public, ("call", 4))
    assert not np.array_equal(again, masked[0])  # a fresh mask every round


UNEQUAL = {"silo_a": slice(0, 900), "silo_b": slice(900, 1200), "silo_c": slice(1200, 1300)}
"""Rows of each silo: 9 : 3 : 1, so a mean by rows and a plain mean of the models differ."""


def unequal_silos():
    return [
        Silo(name, digits, {"rows": rows}, resources={name: 1}) for name, rows in UNEQUAL.items()
    ]


def fedavg(silo_chunks, rounds, local_epochs, classes, by_rows=True):
    """FedAvg written here: every round each silo trains a copy of the global SGDClassifier
    for *local_epochs* passes over its chunks; the next global model is the mean of theirs
    weighted by the rows each saw (*by_rows*; else the plain mean), and its ``t_`` counts the
    rows of every silo, as one pass over all of them would."""
    model = SGDClassifier(random_state=0)
    for _ in range(rounds):
        local, rows = [], []
        for chunks in silo_chunks:
            silo_model = copy.deepcopy(model)
            for _ in range(local_epochs):
                for X, y in chunks:
                    silo_model.partial_fit(X, y, classes=classes)
            local.append(silo_model)
            rows.append(local_epochs * sum(len(X) for X, _ in chunks))
        shares = [n / sum(rows) if by_rows else 1 / len(rows) for n in rows]
        merged = copy.deepcopy(local[0])
        merged.coef_ = sum(share * m.coef_ for share, m in zip(shares, local))
        merged.intercept_ = sum(share * m.intercept_ for share, m in zip(shares, local))
        merged.t_ = getattr(model, "t_", 1.0) + sum(rows)
        model = merged
    return model


@pytest.mark.parametrize("secure_aggregation", [False, True])
def test_unequal_silos_equal_fedavg_weighted_by_rows(client, secure_aggregation):
    """Silos of 900, 300 and 100 rows: the global model equals FedAvg weighted by rows written
    in the test (bit for bit; with masks, to their fixed-point rounding), and is far from the
    plain mean of the silos' models."""
    result = train_federated(
        SGDClassifier(random_state=0),
        unequal_silos(),
        rounds=3,
        local_epochs=2,
        secure_aggregation=secure_aggregation,
        client=client,
    )
    silo_chunks = [digits(rows=rows) for rows in UNEQUAL.values()]
    expected = fedavg(silo_chunks, rounds=3, local_epochs=2, classes=np.arange(10))
    unweighted = fedavg(silo_chunks, 3, 2, np.arange(10), by_rows=False)
    assert result.history[0]["n_samples"] == {"silo_a": 1800, "silo_b": 600, "silo_c": 200}
    atol = 1e-6 if secure_aggregation else 0.0
    for name in ("coef_", "intercept_"):
        got = getattr(result.estimator, name)
        np.testing.assert_allclose(got, getattr(expected, name), rtol=0, atol=atol)
        assert np.abs(got - getattr(unweighted, name)).max() > 1e3 * max(atol, 1e-6)
    assert result.estimator.t_ == expected.t_ == 1 + 3 * 2 * 1300


def test_secure_aggregation_equals_plain_fedavg(client):
    """With masks, the global model equals plain FedAvg's to the fixed-point rounding, and
    plain FedAvg is the loop written in the test, bit for bit."""
    options = {"rounds": 2, "local_epochs": 2, "client": client}
    plain = train_federated(SGDClassifier(random_state=0), silos(), **options)
    secure = train_federated(
        SGDClassifier(random_state=0), silos(), secure_aggregation=True, **options
    )
    expected = fedavg([digits()] * 3, rounds=2, local_epochs=2, classes=np.arange(10))
    np.testing.assert_array_equal(plain.estimator.coef_, expected.coef_)
    np.testing.assert_array_equal(plain.estimator.intercept_, expected.intercept_)
    np.testing.assert_allclose(secure.estimator.coef_, plain.estimator.coef_, atol=1e-6)
    np.testing.assert_allclose(secure.estimator.intercept_, plain.estimator.intercept_, atol=1e-6)
    assert secure.estimator.t_ == plain.estimator.t_
    assert secure.secure_aggregation and not plain.secure_aggregation


@pytest.mark.parametrize("estimator", [SGDClassifier(random_state=0), SGDRegressor(random_state=0)])
def test_one_silo_equals_partial_fit(client, estimator):
    """One silo, 3 rounds of 2 local epochs, is 6 passes of partial_fit over its chunks."""
    one = [Silo("silo_a", digits, resources={"silo_a": 1})]
    result = train_federated(estimator, one, rounds=3, local_epochs=2, client=client)
    serial = copy.deepcopy(estimator)
    for _ in range(6):
        for X, y in digits():
            if hasattr(serial, "classes_") or isinstance(serial, SGDClassifier):
                serial.partial_fit(X, y, classes=np.arange(10))
            else:
                serial.partial_fit(X, y)
    np.testing.assert_array_equal(result.estimator.coef_, serial.coef_)
    np.testing.assert_array_equal(result.estimator.intercept_, serial.intercept_)
    assert result.estimator.t_ == serial.t_
    assert [h["n_samples"] for h in result.history] == [{"silo_a": 3000}] * 3
    assert result.n_samples == {"silo_a": 1500}


def test_identical_silos_equal_one_silo(client):
    """Three silos holding the same rows average three identical models: after one round,
    one silo's model; later rounds continue the learning-rate schedule from the global row
    count (``t_``), as the merge rule does (FedAvg written in the test), and the model stays
    good."""
    three = train_federated(SGDClassifier(random_state=0), silos(), rounds=1, client=client)
    one = train_federated(SGDClassifier(random_state=0), silos()[:1], rounds=1, client=client)
    np.testing.assert_allclose(three.estimator.coef_, one.estimator.coef_, rtol=1e-12)
    assert three.estimator.t_ - 1 == 3 * (one.estimator.t_ - 1)
    X, y = DIGITS.data[HELD_OUT] / 16.0, DIGITS.target[HELD_OUT]
    more = train_federated(SGDClassifier(random_state=0), silos(), rounds=3, client=client)
    expected = fedavg([digits()] * 3, rounds=3, local_epochs=1, classes=np.arange(10))
    np.testing.assert_array_equal(more.estimator.coef_, expected.coef_)
    assert more.estimator.t_ == expected.t_
    assert more.estimator.score(X, y) > 0.8


def test_label_skewed_silos_learn(client):
    """Silos that each hold only some of the digits (and so unequal rows) learn all ten
    together: the model is FedAvg by rows written in the test, and scores above 0.7."""
    X, y = DIGITS.data[HELD_OUT] / 16.0, DIGITS.target[HELD_OUT]
    result = train_federated(
        SGDClassifier(random_state=0),
        silos(labels=([0, 1, 2, 3], [4, 5, 6], [7, 8, 9])),
        rounds=10,
        client=client,
        eval_set=(X, y),
    )
    scores = [h["score"] for h in result.history]
    assert scores[-1] > 0.7, scores  # a silo alone gets at most 0.4
    assert sorted(result.estimator.classes_) == list(range(10))
    labels = ([0, 1, 2, 3], [4, 5, 6], [7, 8, 9])
    expected = fedavg([digits(labels=kept) for kept in labels], 10, 1, np.arange(10))
    np.testing.assert_array_equal(result.estimator.coef_, expected.coef_)
    np.testing.assert_array_equal(result.estimator.intercept_, expected.intercept_)


def test_dp_epsilon_matches_dp_accounting():
    """The ε reported is dp-accounting's RDP accountant's for the same composition."""
    import dp_accounting  # in the test extra: missing, this fails rather than skips

    accountant = dp_accounting.rdp.RdpAccountant()
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(1.1), 50)
    accountant.compose(event)
    assert dp_epsilon(1.1, 50, 1e-5) == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-12)
    pld = dp_accounting.pld.PLDAccountant()
    pld.compose(event)
    assert dp_epsilon(1.1, 50, 1e-5) >= pld.get_epsilon(1e-5) * 0.99  # RDP is an upper bound


def test_dp_training_records_its_privacy(client):
    """A DP training (with masks) reports σ, C, δ, the rounds and the accountant's ε (that of
    dp-accounting's RDP accountant), and still learns with mild noise: within 0.1 of FedAvg
    without noise written in the test."""
    import dp_accounting

    X, y = DIGITS.data[HELD_OUT] / 16.0, DIGITS.target[HELD_OUT]
    dp = DifferentialPrivacy(clip_norm=5.0, noise_multiplier=0.1, delta=1e-4)
    result = train_federated(
        SGDClassifier(random_state=0),
        silos(),
        rounds=4,
        client=client,
        dp=dp,
        secure_aggregation=True,
        random_state=0,
        eval_set=(X, y),
    )
    assert result.privacy == {
        "epsilon": pytest.approx(dp_epsilon(0.1, 4, 1e-4)),
        "delta": 1e-4,
        "noise_multiplier": 0.1,
        "clip_norm": 5.0,
        "rounds": 4,
        "n_silos": 3,
        "accountant": "dp_accounting.rdp.RdpAccountant, GaussianDpEvent x rounds",
    }
    epsilons = [h["epsilon"] for h in result.history]
    assert epsilons == sorted(epsilons)
    assert result.history[-1]["score"] > 0.6
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(0.1), 4))
    assert result.privacy["epsilon"] == pytest.approx(accountant.get_epsilon(1e-4), rel=1e-12)
    noiseless = fedavg([digits()] * 3, rounds=4, local_epochs=1, classes=np.arange(10))
    assert result.history[-1]["score"] >= noiseless.score(X, y) - 0.1


@pytest.mark.parametrize(
    ("make", "options", "message"),
    [
        (
            lambda: [Silo("a", digits, workers=["nobody"])],
            {},
            r"Silo 'a': no worker is named or addressed 'nobody'",
        ),
        (
            lambda: [Silo("a", digits, resources={"gpu": 1})],
            {},
            r"no worker has the resources \{'gpu': 1\}.*'silo_a', 'silo_b', 'silo_c'",
        ),
        (
            lambda: [
                Silo("a", digits, resources={"silo_a": 1}),
                Silo("b", digits, workers=["silo_a"]),
            ],
            {},
            r"belongs to silos 'a' and 'b'",
        ),
        (lambda: silos(), {"rounds": 0}, r"rounds must be a positive integer, got 0"),
        (
            lambda: silos(),
            {"secure_aggregation": True, "estimator": MLPClassifier()},
            r"MLPClassifier \(mlp\) is not one",
        ),
        (
            lambda: silos(),
            {
                "dp": {"clip_norm": 1.0, "noise_multiplier": 0.5},
                "estimator": SGDClassifier(average=True),
            },
            r"SGDClassifier \(average=True\) is not one",
        ),
        (lambda: [Silo("a", digits)], {}, r"Silo 'a' names no workers"),
        (
            lambda: silos(),
            {"dp": {"clip_norm": -1, "noise_multiplier": 1.0}},
            r"clip_norm must be a positive number, got -1",
        ),
    ],
)
def test_errors_name_the_silo_and_the_fix(client, make, options, message):
    """Misconfigured silos and options fail before any task runs, with what to change."""
    options = {"rounds": 1, "client": client, **options}
    estimator = options.pop("estimator", SGDClassifier())
    with pytest.raises(ValueError, match=message):
        train_federated(estimator, make(), **options)


def test_a_task_away_from_its_silo_finds_no_data():
    """A silo's task that runs where the silo did not load its data fails, saying so."""
    from taskdml.parallel.federated._train import _Held, _held

    with pytest.raises(RuntimeError, match=r"does not hold the silo data 'gone', which was "):
        _held(_Held("gone", "tcp://127.0.0.1:1"))


def test_dp_without_dp_accounting_says_what_to_install():
    """Without dp-accounting, dp= fails before any task runs and names the extra."""
    code = (
        "import sys; sys.modules['dp_accounting'] = None\n"
        "from taskdml.parallel import dp_epsilon\n"
        "try:\n    dp_epsilon(1.0, 1, 1e-5)\nexcept ImportError as e:\n    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "pip install taskdml[federated]" in done.stdout, done.stderr
