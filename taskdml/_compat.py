"""Every private name or method of scikit-learn, dask and distributed that taskdml uses.

Each entry below says why taskdml needs it and which upstream releases have it (checked in
the releases' source: scikit-learn 1.6.0, 1.6.1, 1.7.0, 1.8.0, 1.9.0 and 1.9.1; dask and
distributed 2025.1.0 and 2026.8.0). A release that moves one breaks this module, where the
fix is one line, and ``tests/test_compat.py`` fails on it; the other modules use only the
names below or public APIs, which the same test checks by reading their source.

Where the line is:

- private *modules, functions, classes and methods* of upstream (``sklearn.utils._x``,
  ``estimator._check_params(X)``, ``worker.handlers``, ``Status.dont_reply``) are reached
  only through this module: an alias with the upstream name for names, a small function
  for methods and attributes of upstream objects (``check_params(estimator, X)``);
- private *attributes* that are an estimator's learned state (MiniBatchKMeans' ``_counts``,
  SGD's ``_average_coef``, an MLP's ``_optimizer``) are data, not API: the merge rules read and
  write them directly, since merging that state is what a rule is for, and a rule lists those
  it merges in ``MergeRule.private_state`` (compared by ``taskdml.testing.check_merge``);
- hooks scikit-learn calls on our estimators (``__sklearn_tags__``, ``_sk_visual_block_``)
  are definitions, not uses.

Nothing upstream is imported with this module: aliases resolve on first use (PEP 562) and
functions import inside, so base modules and ``cluster/_project`` may import it freely.
Version differences within the supported range are absorbed here and only here: an alias
lists the places a name has lived, newest first, and scikit-learn's callbacks
(:mod:`sklearn.callback`, new in 1.9) have stand-ins that do nothing on older releases.
"""

import importlib
import sys

# ------------------------------------------------------------------------------------------
# Names, resolved on first use: {name: [(module, attribute), ...]}, the newest place first.

_ALIASES = {
    # merge/_neural: an MLP's merged optimiser state is rebuilt in scikit-learn's own
    # optimiser classes, which partial_fit then keeps using. 1.6 to 1.9.1.
    "AdamOptimizer": [("sklearn.neural_network._stochastic_optimizers", "AdamOptimizer")],
    "SGDOptimizer": [("sklearn.neural_network._stochastic_optimizers", "SGDOptimizer")],
    # merge/_builtin: one rule for every SGD-trained linear model (Perceptron and the
    # PassiveAggressive* estimators subclass these bases, which have no public name). 1.6 to 1.9.1.
    "BaseSGDClassifier": [("sklearn.linear_model._stochastic_gradient", "BaseSGDClassifier")],
    "BaseSGDRegressor": [("sklearn.linear_model._stochastic_gradient", "BaseSGDRegressor")],
    # merge/_meta: a meta-estimator's first partial_fit, as scikit-learn decides it. 1.6 to 1.9.1.
    "_check_partial_fit_first_call": [
        ("sklearn.utils.multiclass", "_check_partial_fit_first_call")
    ],
    # merge/_cluster: MiniBatchKMeans' initialisation, done once for every replica as its
    # first partial_fit does it (weights, array-like init, threads). 1.6 to 1.9.1 (keyword-only
    # dtype since 1.7: called with keywords).
    "_check_sample_weight": [("sklearn.utils.validation", "_check_sample_weight")],
    "_is_arraylike_not_scalar": [("sklearn.utils.validation", "_is_arraylike_not_scalar")],
    "_openmp_effective_n_threads": [
        ("sklearn.utils._openmp_helpers", "_openmp_effective_n_threads")
    ],
    # merge/_decomposition: LDA's exp_dirichlet_component_ from the merged components, with
    # the Cython helper partial_fit uses (the same floats). 1.6 to 1.9.1.
    "_dirichlet_expectation_2d": [
        ("sklearn.decomposition._online_lda_fast", "_dirichlet_expectation_2d")
    ],
    # merge/_moments: the scalers' scale_ from merged moments, with scikit-learn's handling of
    # zero and constant features (so merged == one pass). 1.6 to 1.9.1.
    "_handle_zeros_in_scale": [("sklearn.preprocessing._data", "_handle_zeros_in_scale")],
    "_is_constant_feature": [("sklearn.preprocessing._data", "_is_constant_feature")],
    # testing.check_merge: the rows of any input scikit-learn accepts. 1.6 to 1.9.1.
    "_num_samples": [("sklearn.utils.validation", "_num_samples")],
    # estimators/_class_sharded: what OneVsRestClassifier.predict compares per class (the
    # decision function, or predict_proba's positive column). 1.6 to 1.9.1.
    "_predict_binary": [("sklearn.multiclass", "_predict_binary")],
    # testing, grid/_tasks, chunkwise/_tabular: rows or columns of arrays, sparse matrices
    # and DataFrames alike, as scikit-learn's own CV and ColumnTransformer index them. 1.6 to
    # 1.9.1 (sklearn.utils re-exports it from sklearn.utils._indexing).
    "_safe_indexing": [("sklearn.utils", "_safe_indexing")],
    # grid/_search: the HTML repr's block of a search (the refitted best estimator). Moved in
    # 1.7 from sklearn.utils._estimator_html_repr (1.6) to sklearn.utils._repr_html.estimator.
    "_VisualBlock": [
        ("sklearn.utils._repr_html.estimator", "_VisualBlock"),
        ("sklearn.utils._estimator_html_repr", "_VisualBlock"),
    ],
    # grid/_search: scikit-learn's callbacks (set_callbacks, the fit's tasks). Public, but new
    # in 1.9; before it searches have no set_callbacks and these stand-ins do nothing.
    "CallbackSupportMixin": [
        ("sklearn.callback", "CallbackSupportMixin"),
        (__name__, "_NoCallbackSupport"),
    ],
    "with_callbacks": [("sklearn.callback", "with_callbacks"), (__name__, "_without_callbacks")],
    # distributed: the error a closed connection raises (collective/_direct). 2025.1 to 2026.8.
    "CommClosedError": [("distributed.comm", "CommClosedError")],
    # _data.table_frame: a dask DataFrame whose partitions are given tasks (one per sample
    # chunk, built from every column's chunk). The public dd.from_delayed makes such a frame,
    # but in 2026.8 its conversion to a dask array (to_dask_array, .values, the predictions of
    # a fitted model) loses the parts' tasks ("Missing dependency ... fromdelayed-"); the
    # graph form does not. dask 2025.1 to 2026.8.
    "from_graph": [("dask.dataframe.dask_expr._collection", "from_graph")],
}


# The aliases above (resolved on first use) and the functions below.
__all__ = [
    *_ALIASES,
    "check_alpha",
    "check_max_features",
    "check_mkl_vcomp",
    "check_non_neg_array",
    "check_params",
    "check_params_vs_input",
    "check_w_h",
    "has_callbacks",
    "init_callback_context",
    "init_centroids",
    "init_latent_vars",
    "initialize_dict",
    "relink_birch_views",
    "scorer_accepts_sample_weight",
    "update_class_log_prior",
    "update_feature_log_prob",
    "validate_center_shape",
    "validate_params",
    "collection_meta",
    "add_http_application",
    "address_host",
    "as_frames",
    "client_lock",
    "connect_worker",
    "handler_blocked",
    "held_keys",
    "no_reply",
    "register_worker_plugin",
    "remove_scheduler_plugin",
    "running_nthreads",
    "scheduler_address",
    "scheduler_plugin",
    "set_worker_handler",
    "worker_handler",
    "worker_identity",
    "worker_plugin",
]


def __getattr__(name):
    places = _ALIASES.get(name)
    if places is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for module, attribute in places:
        try:
            value = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError):
            continue
        setattr(sys.modules[__name__], name, value)
        return value
    raise ImportError(
        f"{name} is in none of {[m for m, _ in places]}: this release of the library moved "
        f"it; add its new place to taskdml._compat._ALIASES."
    )


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _NoCallbackSupport:
    """``CallbackSupportMixin`` before scikit-learn 1.9: no ``set_callbacks``."""


def _without_callbacks(method):
    """``with_callbacks`` before scikit-learn 1.9: the method as it is."""
    return method


class _NoCallbackContext:
    """The callback context of an estimator without callbacks: every hook does nothing."""

    def subcontext(self, **kwargs):
        return self

    def call_on_fit_task_begin(self, **kwargs):
        return self

    def call_on_fit_task_end(self, **kwargs):
        return None


# ------------------------------------------------------------------------------------------
# scikit-learn: private methods and state of estimators, scorers and callbacks


def init_callback_context(estimator, **kwargs):
    """``estimator._init_callback_context(**kwargs)``: the root of a fit's callback tasks.

    ``CallbackSupportMixin``'s documented private method, which an estimator with callbacks
    calls once at the start of ``fit`` (scikit-learn 1.9, 1.9.1). Without it (scikit-learn
    < 1.9), a context whose hooks do nothing.
    """
    init = getattr(estimator, "_init_callback_context", None)
    return _NoCallbackContext() if init is None else init(**kwargs)


def has_callbacks(estimator):
    """Whether ``set_callbacks`` gave *estimator* any (``_skl_callbacks``, 1.9 and 1.9.1):
    with none, the search makes no per-fit hooks."""
    return bool(getattr(estimator, "_skl_callbacks", None))


def validate_params(estimator):
    """Check *estimator*'s parameter values now, as its ``fit`` would first: scikit-learn's
    ``_validate_params`` (estimators since 1.2; 1.6 to 1.9.1). Raises its ValueError or
    TypeError; returns False when *estimator* has no such check (not a scikit-learn one; or
    one that inherits ``BaseEstimator`` without declaring ``_parameter_constraints``, as
    XGBoost's and LightGBM's do, on which the check itself fails)."""
    validate = getattr(estimator, "_validate_params", None)
    if validate is None or not hasattr(estimator, "_parameter_constraints"):
        return False
    validate()
    return True


def scorer_accepts_sample_weight(scorer):
    """Whether *scorer* (a scikit-learn scorer or a plain callable) takes ``sample_weight``.

    Scorers say so with ``_accept_sample_weight()`` since scikit-learn 1.7 (to 1.9.1); before
    it, and for plain callables, the signature tells.
    """
    import inspect

    if hasattr(scorer, "_accept_sample_weight"):
        return scorer._accept_sample_weight()
    return "sample_weight" in inspect.signature(scorer).parameters


# merge/_bayes: a discrete naive Bayes' log-probabilities recomputed from merged counts by the
# estimator's own code, as the end of its partial_fit does. MultinomialNB, ComplementNB,
# BernoulliNB, CategoricalNB; 1.6 to 1.9.1.


def check_alpha(estimator):
    """``estimator._check_alpha()``: the smoothing partial_fit uses (warns when tiny)."""
    return estimator._check_alpha()


def update_feature_log_prob(estimator, alpha):
    """``estimator._update_feature_log_prob(alpha)``: ``feature_log_prob_`` from the counts."""
    return estimator._update_feature_log_prob(alpha)


def update_class_log_prior(estimator, class_prior=None):
    """``estimator._update_class_log_prior(class_prior)``: ``class_log_prior_`` from counts."""
    return estimator._update_class_log_prior(class_prior=class_prior)


# merge/_cluster: MiniBatchKMeans' first partial_fit, split so that the centres are drawn once
# and every replica starts from them. 1.6 to 1.9.1 (_validate_center_shape takes an optional
# n_centroids since 1.9, not passed).


def check_params_vs_input(estimator, X):
    """``estimator._check_params_vs_input(X)``: sets ``_init_size`` and the batch size."""
    return estimator._check_params_vs_input(X)


def validate_center_shape(estimator, X, centers):
    """``estimator._validate_center_shape(X, centers)``: an array-like ``init`` checked."""
    return estimator._validate_center_shape(X, centers)


def check_mkl_vcomp(estimator, X, n_samples):
    """``estimator._check_mkl_vcomp(X, n_samples)``: the MKL/vcomp memory-leak warning."""
    return estimator._check_mkl_vcomp(X, n_samples)


def init_centroids(estimator, X, **kwargs):
    """``estimator._init_centroids(X, **kwargs)``: the initial centres (k-means++ or init)."""
    return estimator._init_centroids(X, **kwargs)


# merge/_decomposition: the first partial_fit of LatentDirichletAllocation, MiniBatchNMF and
# MiniBatchDictionaryLearning, without the training, so that every replica starts from the
# same factors. 1.6 to 1.9.1.


def check_non_neg_array(estimator, X, *, reset_n_features, whom):
    """LDA's ``_check_non_neg_array``: X validated (non-negative) and ``n_features_in_`` set."""
    return estimator._check_non_neg_array(X, reset_n_features=reset_n_features, whom=whom)


def init_latent_vars(estimator, n_features, dtype):
    """LDA's ``_init_latent_vars``: the random initial ``components_`` and its priors."""
    return estimator._init_latent_vars(n_features, dtype=dtype)


def check_params(estimator, X):
    """MiniBatchNMF's or MiniBatchDictionaryLearning's ``_check_params(X)``: the derived
    private settings (``_n_components``, ``_gamma``, ``_beta_loss``, ``_rho``...)."""
    return estimator._check_params(X)


def check_w_h(estimator, X, W, H, update_H):
    """MiniBatchNMF's ``_check_w_h``: the initial ``(W, H)``."""
    return estimator._check_w_h(X, W=W, H=H, update_H=update_H)


def initialize_dict(estimator, X, random_state):
    """MiniBatchDictionaryLearning's ``_initialize_dict``: the initial dictionary."""
    return estimator._initialize_dict(X, random_state)


# merge/_meta


def check_max_features(estimator, X):
    """SelectFromModel's ``_check_max_features(X)``, as its first partial_fit calls it (sets
    ``max_features_``). 1.6 to 1.9.1."""
    return estimator._check_max_features(X)


def relink_birch_views(estimator):
    """Restore the views a copied or unpickled ``Birch`` lost; return *estimator*.

    Each node of Birch's CF tree (scikit-learn's private ``_CFNode``, 1.6 to 1.9.1) keeps
    ``centroids_`` and ``squared_norm_`` as views of ``init_centroids_`` and ``init_sq_norm_``
    and updates only the latter in place. A deep copy or a pickle round trip (every hop of a
    chain of tasks) turns the views into independent arrays, and the next ``partial_fit`` then
    searches the tree with stale centroids. Any other estimator is returned untouched.
    """
    from sklearn.cluster import Birch

    if not isinstance(estimator, Birch) or not hasattr(estimator, "root_"):
        return estimator
    nodes, seen = [estimator.root_], set()
    while nodes:
        node = nodes.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        n_subclusters = len(node.subclusters_)
        node.centroids_ = node.init_centroids_[:n_subclusters]
        node.squared_norm_ = node.init_sq_norm_[:n_subclusters]
        nodes.extend(sub.child_ for sub in node.subclusters_ if sub.child_ is not None)
    return estimator


# ------------------------------------------------------------------------------------------
# dask


def collection_meta(collection):
    """The empty NumPy/pandas-like object that describes a dask Array's or DataFrame's
    partitions: ``collection._meta``, what dask's own ``meta=`` arguments take. No public
    accessor covers both (``dask.dataframe.utils.make_meta`` reads it for frames). dask
    2025.1 to 2026.8."""
    return collection._meta


# ------------------------------------------------------------------------------------------
# distributed: workers' handlers and plugins, the scheduler's plugins and web application,
# and a client's own state. distributed has no public API for these; each is in 2025.1.0 and
# 2026.8.0.


async def connect_worker(worker, address):
    """A comm from *worker* to the worker at *address*, with *worker*'s TLS settings
    (``distributed.comm.connect``, ``worker.connection_args``): collective/_direct sends its
    messages on it to the peer's handler (``{"op": name, "reply": False}`` first)."""
    from distributed.comm import connect

    return await connect(address, **worker.connection_args)


def as_frames(value):
    """*value* wrapped to travel in a comm message as its own frames
    (``distributed.protocol.to_serialize``): a NumPy array's buffer goes to the socket as it
    is and the receiver reads it into the array it gets, with no pickling into the message
    (collective/_direct's point-to-point ``send``: a graph superstep's mirror values are
    megabytes). distributed.protocol is the comms' own layer. 2025.1 to 2026.8."""
    from distributed.protocol import to_serialize

    return to_serialize(value)


def worker_identity(worker, address):
    """A coroutine: the identity of the worker at *address*, asked by *worker* over its
    connection pool (``worker.rpc(address).identity()``), to tell a slow peer from a dead one."""
    return worker.rpc(address).identity()


def no_reply():
    """What a handler returns to write no reply (``distributed.core.Status.dont_reply``)."""
    from distributed.core import Status

    return Status.dont_reply


def set_worker_handler(worker, name, handler):
    """Install *handler* as *worker*'s comm handler *name* (``worker.handlers``)."""
    worker.handlers[name] = handler


def worker_handler(worker, name):
    """*worker*'s comm handler *name*, or ``None`` (``worker.handlers``)."""
    return worker.handlers.get(name)


def handler_blocked(worker, name):
    """Whether the configuration blocks handler *name* on *worker*
    (``distributed.worker.blocked-handlers``, kept in ``worker.blocked_handlers``)."""
    return name in worker.blocked_handlers


def worker_plugin(worker, name):
    """The worker plugin registered as *name* on *worker* (``worker.plugins``)."""
    return worker.plugins[name]


def scheduler_plugin(scheduler, name):
    """The scheduler plugin registered as *name*, or ``None`` (``scheduler.plugins``)."""
    return scheduler.plugins.get(name)


def remove_scheduler_plugin(scheduler, name):
    """Forget the scheduler plugin *name*, so that registering a new one under that name
    gives no "overwriting" warning (``scheduler.plugins``)."""
    scheduler.plugins.pop(name, None)


async def register_worker_plugin(scheduler, plugin, name):
    """Register *plugin* on every worker, from the scheduler itself (a scheduler plugin's
    ``start``): the scheduler's ``register_worker_plugin`` handler, which takes the plugin
    pickled by ``distributed.protocol.pickle.dumps``."""
    from distributed.protocol.pickle import dumps

    return await scheduler.register_worker_plugin(
        comm=None, plugin=dumps(plugin), name=name, idempotent=False
    )


def add_http_application(scheduler, application):
    """Serve a tornado *application*'s routes from the scheduler's web server, beside the
    dashboard (``scheduler.http_application``)."""
    scheduler.http_application.add_application(application)


def held_keys(client):
    """The keys of the futures *client* holds (``client.futures``; ``in`` is what we need)."""
    return client.futures


def client_lock(client, name):
    """A ``distributed.Lock`` named *name* on *client*'s scheduler, whichever client is the
    default (``Lock(scheduler_rpc=client.scheduler, loop=client.loop)``)."""
    from distributed import Lock

    return Lock(name, scheduler_rpc=client.scheduler, loop=client.loop)


def running_nthreads(client):
    """``{address: threads}`` of the workers whose status is running (not paused over their
    memory's pause fraction, not closing): the scheduler's ``ncores_running``, which
    ``Client.wait_for_workers`` asks too."""
    return client.sync(client.scheduler.ncores_running)


def scheduler_address(client):
    """The address of *client*'s scheduler (``client.scheduler.address``, without asking it)."""
    return client.scheduler.address


def address_host(address):
    """The host of a distributed address (``"tcp://127.0.0.1:8786"`` -> ``"127.0.0.1"``)."""
    from distributed.comm import get_address_host

    return get_address_host(address)
