"""Gradient-boosted trees trained by their own libraries' distributed training on Dask.

XGBoost and LightGBM have no ``partial_fit`` and no merge rule: their trees grow from
histograms summed over every row, which each library all-reduces between workers itself
(XGBoost's collective, LightGBM's socket network). Both ship a Dask front end that trains on
the chunks where they are, one long-running task per worker that holds data
(``xgboost.dask.DaskXGBClassifier``, ``lightgbm.DaskLGBMClassifier``). So for these
estimators the engine hands the whole training to the library, in the place where replicas
would otherwise run (:func:`taskdml.parallel.train` decides when; small data is still fitted
at once on one worker), and turns the distributed model back into the plain in-memory
estimator (``XGBClassifier`` holding the booster, ``LGBMClassifier`` holding ``booster_``), so
that evaluating, predicting, caching and loading a run's model see the class the user named.

The estimators are found by their class's module and name, without importing either library
(:data:`DASK_CLASSES`): taskdml does not depend on them (the ``boosting`` extra installs them).
"""

import time
import warnings

from taskdml._apply import transformed

DASK_CLASSES = {
    "xgboost.sklearn:XGBClassifier": "xgboost.dask:DaskXGBClassifier",
    "xgboost.sklearn:XGBRegressor": "xgboost.dask:DaskXGBRegressor",
    "lightgbm.sklearn:LGBMClassifier": "lightgbm.dask:DaskLGBMClassifier",
    "lightgbm.sklearn:LGBMRegressor": "lightgbm.dask:DaskLGBMRegressor",
}
"""``module:Class`` of an in-memory estimator → ``module:Class`` of its library's Dask
estimator, which trains it on every worker holding its data."""


def dask_class_name(estimator):
    """The ``module:Class`` of *estimator*'s Dask training, or ``None`` if it has none.

    Parameters
    ----------
    estimator : estimator

    Returns
    -------
    str or None

    Examples
    --------
    >>> from sklearn.linear_model import SGDClassifier
    >>> dask_class_name(SGDClassifier()) is None
    True
    """
    kind = type(estimator)
    return DASK_CLASSES.get(f"{kind.__module__}:{kind.__qualname__}")


def fit(estimator, X, y, sample_weight, preprocess, client):
    """Train a copy of *estimator* with its library's Dask training on *client*'s workers.

    Parameters
    ----------
    estimator : XGBClassifier, XGBRegressor, LGBMClassifier or LGBMRegressor
        Unfitted or fitted (its parameters are what count: the training starts afresh).
    X : dask.array.Array of shape (n_samples, n_features)
        Chunked along samples; the chunks stay on the workers that hold them.
    y, sample_weight : dask.array.Array of shape (n_samples,), optional
    preprocess : sequence of fitted transformers
        Applied to each chunk of X first.
    client : distributed.Client

    Returns
    -------
    estimator : the class of *estimator*
        The trained in-memory model (the same predictions as the Dask one).
    stats : dict
        ``library``, ``dask_class``, ``workers`` (the cluster's: the library trains on those
        holding chunks) and ``train_s``.
    """
    import importlib

    module, _, name = dask_class_name(estimator).partition(":")
    dask_class = getattr(importlib.import_module(module), name)
    X = transformed(X, preprocess)
    if X.numblocks[1] != 1:  # both libraries take row chunks of every column
        X = X.rechunk({1: -1})
    params = estimator.get_params()
    began = time.perf_counter()
    if module.startswith("xgboost"):
        model = dask_class(**params)
        model.client = client
    else:
        # LightGBM's Dask training sets its own threads per worker and says so for n_jobs
        params.pop("n_jobs", None)
        model = dask_class(client=client, **params)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Parameter n_jobs will be ignored")
        fit_kwargs = {} if sample_weight is None else {"sample_weight": sample_weight}
        model.fit(X, y, **fit_kwargs)
    stats = {
        "library": module.split(".")[0],
        "dask_class": f"{module}:{name}",
        "workers": sorted(client.scheduler_info(n_workers=-1)["workers"]),
        "train_s": time.perf_counter() - began,
    }
    return _in_memory(estimator, model), stats


def _in_memory(estimator, model):
    """The Dask *model* as the in-memory class of *estimator*, through each library's public
    way: LightGBM's ``to_local``; XGBoost's booster saved and loaded by the sklearn class
    (which reads ``classes_`` and ``n_classes_`` back from it)."""
    if hasattr(model, "to_local"):
        return model.to_local()
    local = type(estimator)(**estimator.get_params())
    local.load_model(bytearray(model.get_booster().save_raw("ubj")))
    return local
