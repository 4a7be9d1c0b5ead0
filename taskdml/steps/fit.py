"""``fit:`` steps: an estimator trained on a dataset by the training engine.

``fit:`` names an estimator class, or a factory that returns an estimator (a scikit-learn
``Pipeline`` whose ``ColumnTransformer`` encodes a table's columns, say); ``with`` and
``foreach`` are its arguments. ``parallel:`` carries the engine's options (``strategy``,
``sync_every``, ``staleness``, ``epochs``, ``n_replicas``, ...: the keys each mode reads are
:func:`taskdml.parallel.engine._options.mode_keys`). The manifest
records each training's history and facts, the sync periods among them (with ``sync_every:
auto``, what they were chosen from). With ``foreach``, every item is its own estimator (item
values are estimator parameters), trained side by side: each item's training runs in its own
client thread, in the step's context (client, span and key names).

``parallel.mode`` picks the kind of parallelism: ``data`` (the default: the engine's replicas),
``task`` (one ``partial_fit`` chain, or one ``fit``, per training), ``model`` (the classes
split across workers by :class:`~taskdml.parallel.ClassSharded`), ``federated`` (trained in the
pipeline's silos by :func:`~taskdml.parallel.train_federated`; the step has no data input) or
``auto`` (:mod:`taskdml.parallel._choice`, the choice and its reason in the manifest).
"""

import concurrent.futures
import contextvars
import time

from taskdml import _events
from taskdml._apply import transformed
from taskdml._compat import collection_meta
from taskdml._data import unwrap
from taskdml.cache import _checkpoints as _checkpoint
from taskdml.parallel import train
from taskdml.parallel._choice import choose_fit, sharded_model_bytes
from taskdml.parallel.engine._train import TrainResult
from taskdml.pipeline._model import resolve_callable, thaw
from taskdml.pipeline._schema import MODE_KEYS
from taskdml.runner._values import step_data


def run(step, inputs, context):
    """Fit the step's estimator on ``inputs["data"]`` with the training engine.

    Parameters
    ----------
    step : Step
    inputs : dict
        ``data`` (any value :func:`taskdml.runner._values.step_data` accepts) and optionally
        ``preprocess`` (fitted transformers).
    context : StepContext

    Returns
    -------
    dict
        ``{"model": estimator}``, or ``{"model": {item: estimator}}`` with foreach.
    """
    # An estimator class, or a factory that returns an estimator (a Pipeline, say).
    estimator_class = context.pipeline.resolve(step)
    options = thaw(step.parallel or {})
    mode = options.pop("mode", "data")
    preprocess = as_transformers(inputs.get("preprocess", []))
    data = None if mode == "federated" else step_data(inputs, "data", context)
    items = step.foreach_items()
    if mode == "auto":
        first = estimator_class(**thaw(step.with_ or {}), **items[0][1])
        choice = _choose(first, data, preprocess, step.classes, context.client)
        context.note(parallel=choice.record())
        mode = choice.mode
        options = {k: v for k, v in options.items() if k in MODE_KEYS[mode]}
    trainer = _TRAINERS[mode]

    def fit_item(label, params):
        estimator = estimator_class(**thaw(step.with_ or {}), **params)
        # each item's training keeps its own checkpoints, and tags its events
        with _checkpoint.item(label), _events.item(label):
            result = trainer(estimator, data, preprocess, step, context, options)
        context.save_model(result.estimator, item=label)
        context.record_training(result, item=label)
        return result.estimator

    if items[0][0] is None:
        return {"model": fit_item(None, {})}
    with concurrent.futures.ThreadPoolExecutor(len(items), thread_name_prefix=step.name) as pool:
        futures = {
            label: pool.submit(contextvars.copy_context().run, fit_item, label, params)
            for label, params in items
        }
        return {"model": {label: future.result() for label, future in futures.items()}}


def _data_parallel(estimator, data, preprocess, step, context, options):
    # X and y, or a table (feature columns as variables, and y); as far as the estimator's
    # own fit would train unless the file says how many epochs
    return train(
        estimator,
        data,
        preprocess=preprocess,
        classes=step.classes,
        client=context.client,
        **{"epochs": "auto", **options},
    )


def _task_parallel(estimator, data, preprocess, step, context, options):
    """One training per task chain: ``partial_fit`` chunk after chunk, or one ``fit``."""
    strategy = "sequential" if hasattr(estimator, "partial_fit") else None
    return _data_parallel(
        estimator, data, preprocess, step, context, {**options, "strategy": strategy}
    )


def _model_parallel(estimator, data, preprocess, step, context, options):
    """The classes split into shards, each trained on every chunk on one worker."""
    from taskdml.parallel import ClassSharded

    began = time.perf_counter()
    X, y, weight, _ = unwrap(data)
    model = ClassSharded(
        estimator,
        n_shards=options.get("n_shards"),
        epochs=options.get("epochs", 1),
        n_replicas=options.get("n_replicas") or 1,
        sync_every=options.get("sync_every", 1),
    ).fit(transformed(X, preprocess), y, classes=step.classes, sample_weight=weight)
    holders = context.client.who_has(model.shards_) if context.client else {}
    stats = {
        "wall_s": time.perf_counter() - began,
        "shards": len(model.shards_),
        "replicas": model.n_replicas,
        "placement": {str(shard): where for shard, where in model.placement_.items()},
        "classes": len(model.classes_),
        "coef_bytes": sharded_model_bytes(estimator, model.n_features_in_, len(model.classes_)),
        "workers": sorted({address for where in holders.values() for address in where}),
        "n_chunks": len(X.chunks[0]),
    }
    return TrainResult(model, [], "model", stats)


def _federated(estimator, data, preprocess, step, context, options):
    """FedAvg across the pipeline's silos; only model state leaves them."""
    from taskdml.parallel import Silo, train_federated

    silos = [
        Silo(
            name,
            resolve_callable(spec["load"], context.pipeline.allow, trust=context.pipeline.trust),
            spec.get("with", {}),
            workers=[str(w) for w in spec.get("workers", ())],
            resources=spec.get("resources"),
        )
        for name, spec in context.pipeline.silos_of(step).items()
    ]
    result = train_federated(
        estimator,
        silos,
        rounds=options["rounds"],
        local_epochs=options.get("local_epochs", 1),
        classes=step.classes,
        client=context.client,
        random_state=options.get("random_state"),
        secure_aggregation=options.get("secure_aggregation", False),
        dp=options.get("dp"),
    )
    stats = {
        "rounds": len(result.history),
        "n_samples": result.n_samples,
        "workers": result.workers,
        "secure_aggregation": result.secure_aggregation,
        "privacy": result.privacy,
    }
    history, seen = [], 0
    for entry in result.history:  # rows trained so far: every silo's, local_epochs times
        seen += sum(entry["n_samples"].values()) * options.get("local_epochs", 1)
        history.append({"round": entry["round"], "duration_s": entry["seconds"],
                        "samples_seen": seen})  # fmt: skip
        if entry.get("epsilon") is not None:
            history[-1]["epsilon"] = entry["epsilon"]
    return TrainResult(result.estimator, history, "federated", stats)


_TRAINERS = {
    "data": _data_parallel,
    "task": _task_parallel,
    "model": _model_parallel,
    "federated": _federated,
}


def _choose(estimator, data, preprocess, classes, client):
    """``mode: auto``: the sizes of the model and the data against the workers' memory."""
    import numpy as np
    from sklearn.base import is_classifier

    from taskdml._data import is_frame

    X, y, _, _ = unwrap(data)
    if is_frame(X):  # a table: its Pipeline encodes the columns, a width unknown here
        return choose_fit(estimator, None, None, X.npartitions, None, client)
    X = transformed(X, preprocess)
    n_classes = None
    if is_classifier(estimator):
        n_classes = len(classes) if classes is not None else len(np.unique(y.compute()))
    sparse = hasattr(collection_meta(X), "tocsr")  # its size is unknown until it is computed
    data_bytes = None if sparse else X.nbytes
    return choose_fit(estimator, X.shape[1], n_classes, len(X.chunks[0]), data_bytes, client)


def as_transformers(preprocess):
    """The ``preprocess`` input as a list of fitted transformers.

    Parameters
    ----------
    preprocess : estimator or list of estimators

    Returns
    -------
    list

    Raises
    ------
    PipelineError
        When it is the dict of models a foreach step produced.
    """
    from taskdml.exceptions import PipelineError

    preprocess = preprocess if isinstance(preprocess, list) else [preprocess]
    for transformer in preprocess:
        if isinstance(transformer, dict):
            raise PipelineError(
                "a 'preprocess' input must be one fitted model, not the "
                f"{len(transformer)} models of a foreach step; pick one with a "
                "step of its own."
            )
    return preprocess
