"""A fit whose estimator or ``scoring`` the workers cannot import raises at once, not hang.

Each test writes a module into its own ``tmp_path`` and imports it in this process only: the
session cluster's workers were started before that directory existed, so they cannot import
it (a benchmark script's own module, a notebook's helper file). Unpickling a task that carries
such an object used to break the worker's connection to the scheduler again and again: an
adaptive search waited forever and a grid search failed with a ``FutureCancelledError``.
"""

import importlib
import sys
import textwrap
import uuid

import numpy as np
import pytest
from sklearn.linear_model import SGDClassifier

from taskdml import (
    ASHASearchCV,
    GridSearchCV,
    HyperbandSearchCV,
    RandomizedSearchCV,
    SuccessiveHalvingSearchCV,
    WorkerImportError,
)
from taskdml._warm import check_loadable
from taskdml.parallel import DataParallel

SOURCE = """
import numpy as np
from sklearn.linear_model import SGDClassifier


def accuracy(estimator, X, y):
    return float(np.mean(estimator.predict(X) == y))


class Accuracy:
    def __call__(self, estimator, X, y):
        return accuracy(estimator, X, y)


class MySGD(SGDClassifier):
    pass


class Hinge(str):
    def __new__(cls):
        return super().__new__(cls, "hinge")
"""


def _import_from(directory, name, source):
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.py").write_text(textwrap.dedent(source))
    sys.path.insert(0, str(directory))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(directory))  # the module stays imported; its folder leaves the path


@pytest.fixture
def local_module(tmp_path):
    """A module only this process can import (a fresh name: the workers never saw it)."""
    name = f"client_only_{uuid.uuid4().hex[:8]}"
    module = _import_from(tmp_path / "here", name, SOURCE)
    yield module
    sys.modules.pop(name, None)


@pytest.fixture
def data():
    X = np.random.default_rng(0).normal(size=(240, 4))
    return X, (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int)


def _chunked(X, y):
    import dask.array as da

    return da.from_array(X, chunks=40), da.from_array(y, chunks=40)


SPACE = {"alpha": [1e-4, 1e-3]}
VALIDATION = (np.ones((4, 4)), np.array([0, 1, 0, 1]))
CASES = {
    "asha scoring function": (
        "ASHASearchCV.fit",
        "scoring",
        lambda m: ASHASearchCV(SGDClassifier(), SPACE, max_epochs=3, scoring=m.accuracy),
        False,
    ),
    "asha scorer instance": (
        "ASHASearchCV.fit",
        "scoring",
        lambda m: ASHASearchCV(SGDClassifier(), SPACE, max_epochs=3, scoring=m.Accuracy()),
        False,
    ),
    "hyperband scoring": (
        "HyperbandSearchCV.fit",
        "scoring",
        lambda m: HyperbandSearchCV(SGDClassifier(), SPACE, max_epochs=3, scoring=m.accuracy),
        False,
    ),
    "halving estimator": (
        "SuccessiveHalvingSearchCV.fit",
        "estimator",
        lambda m: SuccessiveHalvingSearchCV(m.MySGD(), SPACE, max_epochs=3),
        False,
    ),
    "grid scoring": (
        "GridSearchCV.fit",
        "scoring",
        lambda m: GridSearchCV(SGDClassifier(), SPACE, cv=2, scoring=m.accuracy),
        False,
    ),
    "grid estimator on chunks": (
        "GridSearchCV.fit",
        "estimator",
        lambda m: GridSearchCV(m.MySGD(), SPACE, cv=2),
        True,
    ),
    "grid candidate": (
        "GridSearchCV.fit",
        "param_grid",
        lambda m: GridSearchCV(SGDClassifier(), {"loss": ["hinge", m.Hinge()]}, cv=2),
        False,
    ),
    "asha candidate": (
        "ASHASearchCV.fit",
        "param_distributions",
        lambda m: ASHASearchCV(SGDClassifier(), {"loss": [m.Hinge()]}, max_epochs=3),
        False,
    ),
    "random scoring": (
        "RandomizedSearchCV.fit",
        "scoring",
        lambda m: RandomizedSearchCV(SGDClassifier(), SPACE, n_iter=2, cv=2, scoring=m.accuracy),
        False,
    ),
    "data-parallel scoring": (
        "train",
        "scoring",
        lambda m: DataParallel(
            SGDClassifier(), strategy="sync", scoring=m.accuracy, validation=VALIDATION
        ),
        True,
    ),
    "data-parallel estimator": (
        "train",
        "estimator",
        lambda m: DataParallel(m.MySGD(), strategy="sync"),
        True,
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(CASES))
def test_unimportable_object_raises_naming_it(client, local_module, data, case):
    """The fit raises WorkerImportError naming the owner, the parameter, the module, the fix."""
    owner, parameter, build, chunked = CASES[case]
    X, y = _chunked(*data) if chunked else data
    estimator = build(local_module)
    kwargs = {"classes": [0, 1]} if isinstance(estimator, DataParallel) else {}
    name = local_module.__name__
    with pytest.raises(WorkerImportError) as raised:
        estimator.fit(X, y, **kwargs)
    message = str(raised.value)
    assert message.startswith(f"{owner}: the workers cannot import module {name!r}, which ")
    assert f"{parameter}=" in message
    assert f"client.upload_file({local_module.__file__!r})" in message
    assert "PYTHONPATH" in message
    assert isinstance(raised.value, ImportError)
    assert len(client.nthreads()) == 2  # no worker was lost to the message


@pytest.mark.timeout(60)
def test_upload_file_is_the_fix(client, local_module, data):
    """After the error, the fix it names works: the search's best score is scikit-learn's."""
    from sklearn.model_selection import GridSearchCV as SklearnGridSearchCV

    X, y = data
    estimator = SGDClassifier(random_state=0)
    search = GridSearchCV(estimator, SPACE, cv=2, scoring=local_module.accuracy)
    with pytest.raises(WorkerImportError):
        search.fit(X, y)
    client.upload_file(local_module.__file__)
    search.fit(X, y)
    reference = SklearnGridSearchCV(estimator, SPACE, cv=2, scoring=local_module.accuracy)
    reference.fit(X, y)
    assert search.best_params_ == reference.best_params_
    assert search.best_score_ == pytest.approx(reference.best_score_)


@pytest.mark.timeout(60)
def test_a_different_copy_on_the_workers_is_named(client, tmp_path):
    """A module the workers import, without the function asked for: the error says so."""
    name = f"client_copy_{uuid.uuid4().hex[:8]}"
    old = tmp_path / "old"
    old.mkdir()
    (old / f"{name}.py").write_text("VERSION = 1\n")
    client.upload_file(str(old / f"{name}.py"))
    sys.modules.pop(name, None)  # a LocalCluster's scheduler, in this process, imported it
    module = _import_from(tmp_path / "new", name, "VERSION = 2\n" + SOURCE)
    try:
        with pytest.raises(WorkerImportError, match="Make the same version of its code") as raised:
            check_loadable(client, {"scoring": module.accuracy}, owner="example")
    finally:
        sys.modules.pop(name, None)
    assert str(raised.value).startswith("example: the workers cannot load scoring=<function")
    assert "AttributeError" in str(raised.value)


def test_nothing_to_check_without_a_client(local_module):
    """Without a client (or with only names) nothing is sent and nothing raised."""
    assert check_loadable(None, {"scoring": local_module.accuracy}, owner="x") is None


@pytest.mark.timeout(60)
def test_scoring_used_only_here_is_not_refused(client, local_module, data):
    """A sequential training scores in this process: a client-only scorer still works."""
    from sklearn.metrics import accuracy_score

    X, y = data
    X_val, y_val = X[:60], y[:60]
    model = DataParallel(
        SGDClassifier(random_state=0),
        strategy="sequential",
        epochs=2,
        scoring=local_module.accuracy,
        validation=(X_val, y_val),
    ).fit(*_chunked(X, y), classes=[0, 1])
    expected = accuracy_score(y_val, model.estimator_.predict(X_val))
    assert model.history_[-1]["validation_score"] == pytest.approx(expected)


def test_what_the_workers_loaded_once_is_not_sent_again(client, handler_calls, data):
    """The check asks the workers once per object: a second fit with the same estimator, or
    with a fitted copy of it (its state is not what the workers import), makes no broadcast;
    an estimator with other parameters does (counted at the scheduler's ``broadcast``
    handler, which ``client.run`` goes through)."""
    estimator = SGDClassifier(alpha=1e-3)  # the cache is the client's: this one is new
    with handler_calls("broadcast") as calls:
        check_loadable(client, {"estimator": estimator}, owner="example")
        assert calls == ["broadcast"]
        check_loadable(client, {"estimator": estimator}, owner="example")
        check_loadable(client, {"estimator": estimator.fit(*data)}, owner="example")
        assert calls == ["broadcast"]
        check_loadable(client, {"estimator": SGDClassifier(alpha=0.5)}, owner="example")
        assert calls == ["broadcast", "broadcast"]


def _faults_of_an_mlp_fit():
    """Task: the minor page faults of this thread during a small MLPClassifier fit (batches
    of 200 rows: its temporaries are 160 KiB-1.6 MiB arrays)."""
    import resource
    import warnings

    from sklearn.neural_network import MLPClassifier

    X = np.random.default_rng(0).normal(size=(10_000, 20))
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        MLPClassifier(max_iter=10, random_state=0).fit(X, X[:, 0] > 0)
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before


def test_the_plugin_keeps_numpy_temporaries_off_fresh_pages():
    """distributed starts its workers with MALLOC_TRIM_THRESHOLD_, which freezes glibc's mmap
    threshold at 128 KiB: every larger NumPy temporary is a fresh mmap whose pages fault in
    again (the worker's own count of minor page faults, before and after). Once taskdml's
    plugin is on the worker, the same fit takes half of them at most (measured: 20,766
    against 2,070 alone, 11,875 against 2,480 on a loaded machine)."""
    from distributed import Client, LocalCluster

    from taskdml._warm import prepare

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        environ = client.run(lambda: dict(__import__("os").environ)).popitem()[1]
        if "MALLOC_TRIM_THRESHOLD_" not in environ:
            pytest.skip("this distributed does not set MALLOC_TRIM_THRESHOLD_ on its workers")
        client.submit(_faults_of_an_mlp_fit, pure=False).result()  # imports, first touches
        before = client.submit(_faults_of_an_mlp_fit, pure=False).result()
        prepare(client, ["numpy"])
        after = client.submit(_faults_of_an_mlp_fit, pure=False).result()
        assert after <= before / 2, (before, after)
