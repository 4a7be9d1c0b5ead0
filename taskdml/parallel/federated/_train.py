"""Federated training: FedAvg across data silos that never share their rows.

A :class:`Silo` is a named group of Dask workers (by worker name or address, or by a Dask
resource every worker of the group has) and a loader that produces the silo's chunks. The
driver, :func:`train_federated`, resolves every silo to its workers' addresses once, checks
that no worker belongs to two silos, and then submits only tasks restricted to one silo's
workers (``workers=`` those addresses, ``allow_other_workers=False``):

1. *load*: ``silo.load(**silo.kwargs)`` runs on one of them and its chunks stay in that
   worker process for the whole training -- in a module-level store, not as the value of a
   Dask key, so that nothing Dask does with keys (fetch a dependency elsewhere,
   ``retire_workers``, ``rebalance``, ``replicate``) can copy them to another worker: the key
   holds a small handle, and every later task of the silo is restricted to that worker;
2. *round* ``r``: every silo ``partial_fit``\\s a copy of the global model ``local_epochs``
   times over its own chunks and returns the model (or, with secure aggregation or
   differential privacy, only a protected update) and the rows it saw; the coordinator
   merges them with the estimator's merge rule weighted by rows -- FedAvg is the data-parallel
   engine's model averaging with a round of whole local epochs -- and the next round starts
   from the merge.

The global model travels inside the task (from the client through the scheduler), and no task
takes another task's result as input, so there are no worker-to-worker transfers at all. What
moves across silos is model state, the row counts, and, for a classifier trained without
``classes=``, each silo's set of labels.

FedProx (a proximal term ``mu/2 ||w - w_global||^2`` in each local objective) is not offered:
scikit-learn's ``partial_fit`` takes no extra term or gradient hook, and imitating it by
shrinking the weights towards the global model between mini-batches would change the
estimator's own schedule (``t_``, averaging) behind its back. Fewer ``local_epochs`` is the
knob scikit-learn allows against client drift.

Secure aggregation and differential privacy are in :mod:`taskdml.parallel.federated._privacy`.
"""

import copy
import dataclasses
import time
import uuid
from collections.abc import Callable, Mapping

import numpy as np
from sklearn.base import is_classifier

from taskdml import _keys
from taskdml._client import resolve_client
from taskdml.parallel.federated import _privacy as privacy
from taskdml.parallel.merge._registry import (
    _require_rule,
    merge_replicas,
    prepare_start,
    without_round_start,
)


@dataclasses.dataclass(frozen=True)
class Silo:
    """One party of a federated training: its workers and the data it loads there.

    Parameters
    ----------
    name : str
        The silo's name, for the history and messages.
    load : callable
        ``load(**kwargs)`` returns the silo's data: an ``(X, y)`` pair or a list of such
        chunks. It runs on the silo's workers only, and its result stays there.
    kwargs : mapping, optional
        Keyword arguments of ``load``.
    workers : sequence of str, optional
        Names or addresses (``"tcp://127.0.0.1:40000"``) of the silo's workers. Host names
        are refused: a host may run the workers of several silos. The loader runs on one of
        them, and the silo's training on that one.
    resources : mapping, optional
        A Dask resource (``{"silo_a": 1}``): the silo is every worker that has at least these.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from taskdml.parallel import Silo
    >>> silo = Silo("hospital_a", make_classification, {"n_samples": 100},
    ...             resources={"hospital_a": 1})
    >>> silo.name
    'hospital_a'
    """

    name: str
    load: Callable
    kwargs: Mapping = dataclasses.field(default_factory=dict)
    workers: tuple = ()
    resources: Mapping | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Silo name must be a non-empty string, got {self.name!r}.")
        if not callable(self.load):
            raise TypeError(f"Silo {self.name!r}: load must be callable, got {self.load!r}.")
        if isinstance(self.workers, str):
            object.__setattr__(self, "workers", (self.workers,))
        object.__setattr__(self, "workers", tuple(self.workers))
        if not self.workers and not self.resources:
            raise ValueError(
                f"Silo {self.name!r} names no workers: pass workers=[names or addresses] or "
                f"resources={{{self.name!r}: 1}} (a resource its workers were started with)."
            )


@dataclasses.dataclass
class FederatedResult:
    """What :func:`train_federated` returns.

    Attributes
    ----------
    estimator : estimator
        The global model after the last round.
    history : list of dict
        One entry per round: ``round``, ``seconds``, ``n_samples`` (rows each silo trained
        on, per silo name), ``score`` (on ``eval_set``, or None) and ``epsilon`` (spent so
        far, with differential privacy, else None).
    workers : dict
        Silo name -> the addresses of its workers.
    n_samples : dict
        Silo name -> rows it holds.
    secure_aggregation : bool
    privacy : dict or None
        With differential privacy: ``epsilon``, ``delta``, ``noise_multiplier``,
        ``clip_norm``, ``rounds``, ``n_silos`` and ``accountant``.
    """

    estimator: object
    history: list
    workers: dict
    n_samples: dict
    secure_aggregation: bool = False
    privacy: dict | None = None


# -- tasks (run on one silo's workers) ---------------------------------------------------


# The chunks (and secure aggregation's private keys) a worker process holds, by token. They are
# kept out of Dask's store of keys, whose values Dask may copy to any worker (a dependency
# fetched elsewhere, ``retire_workers``, ``rebalance``, ``replicate``); the keys hold only a
# small handle, and a task that runs anywhere else finds nothing.
_HELD = {}


@dataclasses.dataclass(frozen=True)
class _Held:
    """A handle on what one worker holds for a silo: its token, its address, its rows."""

    token: str
    address: str
    n_rows: int = 0


def _worker_address():
    from distributed import get_worker

    try:
        return get_worker().address
    except ValueError:  # not in a worker: the threads of the local scheduler
        return "local"


def _load_silo(load, kwargs, token):
    """Load the silo's data as a list of ``(X, y)`` chunks, keep it here, return a handle."""
    data = load(**dict(kwargs))
    if isinstance(data, tuple) and len(data) == 2 and np.ndim(data[0]) == 2:
        data = [data]
    chunks = [(np.asarray(X), np.asarray(y)) for X, y in data]
    if not chunks or not any(len(X) for X, _ in chunks):
        raise ValueError(f"{getattr(load, '__name__', load)!r} loaded no rows.")
    _HELD[token] = chunks
    return _Held(token, _worker_address(), sum(len(X) for X, _ in chunks))


def _make_keys(token):
    """A key pair kept here; the handle and the public key go back."""
    _HELD[token] = privacy.make_key_pair()
    return _Held(token, _worker_address()), privacy.public_key(_HELD[token])


def _held(handle):
    try:
        return _HELD[handle.token]
    except KeyError:
        raise RuntimeError(
            f"Worker {_worker_address()} does not hold the silo data {handle.token!r}, which "
            f"was loaded on {handle.address}: a silo's tasks must run where it loaded its data "
            f"(was that worker restarted?)."
        ) from None


def _drop(*handles):
    for handle in handles:
        _HELD.pop(handle.token, None)


def _labels(data):
    return np.unique(np.concatenate([np.asarray(y) for _, y in _held(data)]))


def _prepare(estimator, data, classes):
    X, y = _held(data)[0]
    return prepare_start(estimator, X, y, classes=classes)


def _train_locally(estimator, data, classes, local_epochs):
    chunks = _held(data)
    model = copy.deepcopy(estimator)
    rows = 0
    for _ in range(local_epochs):
        for X, y in chunks:
            if len(X) == 0:
                continue
            if classes is None:
                model.partial_fit(X, y)
            else:
                model.partial_fit(X, y, classes=classes)
            rows += len(X)
    return model, rows


def _local_round(estimator, data, classes, local_epochs):
    """FedAvg without protection: the silo's whole model and the rows it saw."""
    return _train_locally(estimator, data, classes, local_epochs)


def _protected_round(
    estimator,
    data,
    classes,
    local_epochs,
    key_pair,
    public_keys,
    index,
    n_silos,
    context,
    dp,
    seed,
):
    """The silo's model without its parameters, the rows it saw, and the parameters as a
    protected update: ``rows * parameters`` (FedAvg weights) or, with ``dp``, the clipped and
    noised difference to the global model; masked with ``key_pair`` if given."""
    model, rows = _train_locally(estimator, data, classes, local_epochs)
    names = _parameter_names(model)
    local = _flatten(model, names)
    if dp is None:
        update = rows * local
    else:
        update = privacy.clip(local - _start(estimator, names, local), dp.clip_norm)
        update = update + privacy.noise_share(update.size, dp, n_silos, seed)
    if key_pair is not None:
        update = privacy.mask(privacy.encode(update), index, _held(key_pair), public_keys, context)
    for name in names:
        setattr(model, name, np.zeros_like(getattr(model, name)))
    return model, rows, update


# -- parameters of the estimators that secure aggregation and DP support --------------------


def _parameter_names(estimator):
    if hasattr(estimator, "offset_"):
        return ("coef_", "offset_")
    return ("coef_", "intercept_")


def _check_protectable(estimator, rule):
    if rule.family == "linear-sgd" and not getattr(estimator, "average", False):
        return
    what = f"average={estimator.average!r}" if rule.family == "linear-sgd" else rule.family
    raise ValueError(
        f"secure_aggregation and dp need a model that FedAvg merges as a plain weighted mean "
        f"of its coefficients; {type(estimator).__name__} ({what}) is not one. Use an "
        f"SGDClassifier, SGDRegressor, Perceptron or SGDOneClassSVM with average=False, or "
        f"train without them."
    )


def _flatten(model, names):
    return np.concatenate(
        [np.ravel(np.asarray(getattr(model, n), dtype=np.float64)) for n in names]
    )


def _start(estimator, names, like):
    """The round's global parameters; zeros (scikit-learn's initial coefficients) before the
    estimator's first fit."""
    if not all(hasattr(estimator, n) for n in names):
        return np.zeros_like(like, dtype=np.float64)
    return _flatten(estimator, names)


def _unflatten(model, names, vector):
    start = 0
    for name in names:
        old = np.asarray(getattr(model, name))
        part = vector[start : start + old.size].reshape(old.shape).astype(old.dtype)
        setattr(model, name, np.ascontiguousarray(part))
        start += old.size


# -- the driver --------------------------------------------------------------------------


def _as_silo(silo):
    if isinstance(silo, Silo):
        return silo
    if isinstance(silo, Mapping):
        return Silo(**silo)
    raise TypeError(f"silos must be Silo objects or mappings of their fields, got {silo!r}.")


def _resolve(client, silos):
    """Silo name -> sorted worker addresses; every silo non-empty, no worker in two."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    by_name = {str(w.get("name")): address for address, w in info.items()}
    resolved, owner = {}, {}
    for silo in silos:
        addresses = set()
        for worker in silo.workers:
            address = worker if worker in info else by_name.get(str(worker))
            if address is None:
                raise ValueError(
                    f"Silo {silo.name!r}: no worker is named or addressed {worker!r}; the "
                    f"cluster has {sorted(by_name)!r} at {sorted(info)!r}."
                )
            addresses.add(address)
        if silo.resources:
            found = {
                address
                for address, w in info.items()
                if all(w.get("resources", {}).get(k, 0) >= v for k, v in silo.resources.items())
            }
            if not found:
                have = sorted({k for w in info.values() for k in w.get("resources", {})})
                raise ValueError(
                    f"Silo {silo.name!r}: no worker has the resources {dict(silo.resources)!r}; "
                    f"the workers have {have!r}. Start the silo's workers with "
                    f"--resources or pass workers= instead."
                )
            addresses = addresses & found if silo.workers else found
        for address in addresses:
            if address in owner:
                raise ValueError(
                    f"Worker {address} belongs to silos {owner[address]!r} and {silo.name!r}; "
                    f"a worker may hold one silo's data only."
                )
            owner[address] = silo.name
        resolved[silo.name] = sorted(addresses)
    return resolved


def _check_count(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"train_federated {name} must be a positive integer, got {value!r}.")
    return int(value)


def train_federated(
    estimator,
    silos,
    *,
    rounds,
    local_epochs=1,
    classes=None,
    client=None,
    random_state=None,
    secure_aggregation=False,
    dp=None,
    eval_set=None,
):
    """Train ``estimator`` by FedAvg across silos whose data never leaves their workers.

    Each round every silo trains a copy of the global model for ``local_epochs`` passes over
    its own chunks, on its own workers, and sends back only model state and its row count;
    the coordinator merges them with the estimator's merge rule, weighted by rows (see
    :func:`taskdml.parallel.get_merge_rule`).

    With ``secure_aggregation=True`` each silo sends ``rows * parameters`` (or, with ``dp``,
    its noised update) masked by pairwise masks that cancel in the sum: the coordinator sees
    the sum over the silos and each silo's row count, never one silo's parameters.
    *Protects* against an honest-but-curious coordinator that follows the protocol and
    reads what it gathers. *Does not* protect against a coordinator that tampers with the
    tasks or reads the workers' memory (here, one Dask cluster: whoever holds its client can
    read any key, including a silo's private key), against a coordinator colluding with all
    the other silos (it then knows every mask of the one left), nor survive a silo dropping
    out mid-round (its masks would no longer cancel: the round fails). With two silos the
    sum and a silo's own update give away the other's: use it with three or more.

    With ``dp`` each silo clips its update to ``dp.clip_norm`` and adds its share of
    Gaussian noise; the global model moves by the mean of the noised updates (unweighted: a
    weight by rows would make a silo's influence, and so the sensitivity, depend on its
    size). The (ε, δ) of client-level DP over the rounds is accounted with ``dp-accounting``
    (install ``taskdml[federated]``). The noise is drawn on the silos; with ``random_state``
    set its seeds are derived from it, so the coordinator could subtract it: seed only for
    tests and benchmarks.

    Parameters
    ----------
    estimator : estimator
        A ``partial_fit`` estimator with a merge rule; not modified. Secure aggregation and
        DP need a linear SGD model with ``average=False``.
    silos : list of Silo or mapping
        The parties; mappings are passed to :class:`Silo` as keyword arguments.
    rounds : int
        Rounds of local training and merging.
    local_epochs : int, default=1
        Passes each silo makes over its chunks per round.
    classes : array-like, optional
        All classes, for classifiers. By default the union of the silos' labels (each silo
        then reveals which labels it holds).
    client : distributed.Client, optional
        Defaults to the current client; silos are groups of its workers.
    random_state : int, optional
        Seeds the DP noise (see above).
    secure_aggregation : bool, default=False
    dp : DifferentialPrivacy or mapping, optional
        ``clip_norm``, ``noise_multiplier`` and ``delta``.
    eval_set : (X, y), optional
        Held-out data on the coordinator, scored after each round (``estimator.score``).

    Returns
    -------
    FederatedResult

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> from sklearn.datasets import make_classification
    >>> from sklearn.linear_model import SGDClassifier
    >>> from taskdml.parallel import Silo, train_federated
    >>> with LocalCluster(n_workers=2, processes=False) as cluster, Client(cluster) as client:
    ...     a, b = sorted(client.scheduler_info()["workers"])
    ...     silos = [Silo("a", make_classification, {"random_state": 0}, workers=[a]),
    ...              Silo("b", make_classification, {"random_state": 0}, workers=[b])]
    ...     result = train_federated(SGDClassifier(random_state=0), silos, rounds=2)
    >>> len(result.history), result.n_samples
    (2, {'a': 100, 'b': 100})
    """
    silos = [_as_silo(s) for s in silos]
    if not silos:
        raise ValueError("train_federated got no silos; pass at least one Silo.")
    names = [s.name for s in silos]
    if len(set(names)) != len(names):
        raise ValueError(f"Silo names must be unique, got {names!r}.")
    rounds = _check_count("rounds", rounds)
    local_epochs = _check_count("local_epochs", local_epochs)
    if dp is not None and not isinstance(dp, privacy.DifferentialPrivacy):
        dp = privacy.DifferentialPrivacy(**dict(dp))
    rule = _require_rule(estimator, "train federated")
    if secure_aggregation or dp is not None:
        _check_protectable(estimator, rule)
    if dp is not None:
        privacy.dp_epsilon(dp.noise_multiplier, 1, dp.delta)  # fails early without the package
    client = resolve_client(client, required="train_federated")
    workers = _resolve(client, silos)
    call = uuid.uuid4().hex  # fresh data, keys and tokens per call

    def submit(function, phase, index, where, *args):
        key = (_keys.key_name("federated", call, phase=phase), *index)
        return client.submit(function, *args, key=key, workers=where, allow_other_workers=False)

    data = client.gather(
        [
            submit(_load_silo, "load", (i,), workers[s.name], s.load, s.kwargs, f"{call}-{i}")
            for i, s in enumerate(silos)
        ]
    )
    # From here on each silo's tasks run where its data is: the worker of its silo that loaded it.
    where = [[d.address] for d in data]
    key_pairs = []
    try:
        if classes is None and is_classifier(estimator):
            labels = client.gather(
                [submit(_labels, "labels", (i,), where[i], d) for i, d in enumerate(data)]
            )
            classes = np.unique(np.concatenate(labels))
        if not is_classifier(estimator):
            classes = None
        current = submit(_prepare, "prepare", (0,), where[0], estimator, data[0], classes)
        current = current.result()
        public_keys = None
        if secure_aggregation:
            made = client.gather(
                [
                    submit(_make_keys, "keys", (i,), where[i], f"{call}-{i}-key")
                    for i in range(len(data))
                ]
            )
            key_pairs, public_keys = [h for h, _ in made], [k for _, k in made]
        seeds = np.random.SeedSequence(random_state).spawn(rounds * len(silos))
        history = []
        for r in range(rounds):
            began = time.perf_counter()
            if secure_aggregation or dp is not None:
                futures = [
                    submit(
                        _protected_round, "round", (r, i), where[i], current, data[i], classes,
                        local_epochs, key_pairs[i] if key_pairs else None, public_keys, i,
                        len(silos), (call, r), dp,
                        None if random_state is None else seeds[r * len(silos) + i],
                    )
                    for i in range(len(silos))
                ]  # fmt: skip
                outcomes = client.gather(futures)
                current = _merge_protected(current, outcomes, rule, dp, secure_aggregation)
            else:
                futures = [
                    submit(
                        _local_round, "round", (r, i), where[i], current, data[i], classes,
                        local_epochs,
                    )
                    for i in range(len(silos))
                ]  # fmt: skip
                outcomes = client.gather(futures)
                models, rows = [m for m, _ in outcomes], [n for _, n in outcomes]
                current = merge_replicas(models, rows, rule=rule)
            del futures
            score = None
            if eval_set is not None:
                score = float(without_round_start(copy.deepcopy(current)).score(*eval_set))
            history.append(
                {
                    "round": r + 1,
                    "seconds": time.perf_counter() - began,
                    "n_samples": {s.name: o[1] for s, o in zip(silos, outcomes)},
                    "score": score,
                    "epsilon": None
                    if dp is None
                    else privacy.dp_epsilon(dp.noise_multiplier, r + 1, dp.delta),
                }
            )
    finally:
        _release(submit, data, key_pairs)
    report = None
    if dp is not None:
        report = {
            "epsilon": history[-1]["epsilon"],
            "delta": dp.delta,
            "noise_multiplier": dp.noise_multiplier,
            "clip_norm": dp.clip_norm,
            "rounds": rounds,
            "n_silos": len(silos),
            "accountant": "dp_accounting.rdp.RdpAccountant, GaussianDpEvent x rounds",
        }
    return FederatedResult(
        estimator=without_round_start(current),
        history=history,
        workers=workers,
        n_samples={s.name: d.n_rows for s, d in zip(silos, data)},
        secure_aggregation=bool(secure_aggregation),
        privacy=report,
    )


def _release(submit, data, key_pairs):
    """Drop what the silos' workers hold for this training (waiting a few seconds at most: a
    worker that died took it along)."""
    from distributed import wait

    drops = [
        submit(_drop, "drop", (i,), [held.address], held, *key_pairs[i : i + 1])
        for i, held in enumerate(data)
    ]
    try:
        wait(drops, timeout=10)
    except TimeoutError:
        pass


def _merge_protected(current, outcomes, rule, dp, secure):
    """The next global model from protected updates: the merge rule runs on the models
    without their parameters (for ``t_`` and the like), the parameters come from the sum."""
    models = [m for m, _, _ in outcomes]
    rows = [n for _, n, _ in outcomes]
    updates = [u for _, _, u in outcomes]
    merged = merge_replicas(models, rows, rule=rule)
    names = _parameter_names(merged)
    total = privacy.aggregate(updates) if secure else np.sum(updates, axis=0)
    if dp is None:
        parameters = total / max(sum(rows), 1)
    else:
        parameters = _start(current, names, total) + total / len(outcomes)
    if not np.all(np.isfinite(parameters)):
        raise FloatingPointError("The aggregated parameters are not finite.")
    _unflatten(merged, names, parameters)
    return merged
