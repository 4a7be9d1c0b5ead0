"""The graph of a search over in-memory data: every candidate × fold as Dask tasks.

Layout of the graph (keys from :func:`taskdml._keys.key_name`, default prefix ``search``):

``search-data``
    One key holding ``X``, ``y``, the fit parameters and the folds' indices; scattered once
    to the cluster (or one literal in the local graph). Nothing else carries data.
``(search-split, fold)``
    The fold's training and test rows, cut once per fold.
``(search-transform, fold)``
    One pipeline step fitted on a fold (``fit_transform``), and the fold's test rows
    transformed by it. The name's token is the fold layout plus the parameters of every step
    up to this one, so candidates that agree on a prefix of a
    :class:`~sklearn.pipeline.Pipeline`'s steps share these tasks: with a grid over the
    classifier only, the scaler is fitted once per fold, not once per candidate and fold.
``(search-fit, fold)`` and ``(search-score, fold)``
    The last step fitted on the shared prefix's output, and scored. Identical candidates get
    identical keys, so identical work runs once.

A step's parameters are compared by value, recursively through nested estimators
(:func:`estimator_spec`); anything that cannot be tokenized deterministically gets a random
token, which only costs a missed share. A prefix whose steps have ``random_state=None`` is
fitted once and shared, where scikit-learn would draw each candidate's randomness anew.

Scorers named by scikit-learn string (and the default ``estimator.score``) only call the
model's prediction methods, so they score the last step on the transformed test rows. A
callable scorer might look inside the pipeline: it gets the pipeline reassembled from the
fitted steps and the raw test rows.
"""

import dataclasses
import os
import uuid

import dask
from dask.base import tokenize

from taskdml._keys import key_name
from taskdml.model_selection import _grid_tasks

PREFIX = "search"


@dataclasses.dataclass(frozen=True)
class SearchData:
    """What the ``search-data`` key holds: the rows, the fit parameters and the folds.

    ``score_params`` are the scorers' parameters (``sample_weight``, routed metadata), by
    metric name (``None`` for a single scorer). ``config`` is scikit-learn's configuration
    where the search was fitted (:func:`sklearn.get_config`): the tasks run under it.
    """

    X: object
    y: object
    fit_params: dict
    splits: tuple
    score_params: dict = dataclasses.field(default_factory=dict)
    config: dict = dataclasses.field(default_factory=dict)


def estimator_spec(value):
    """A tokenizable description of *value* that two equal estimators share.

    Unfitted estimators are described by their class and parameters (recursively); a fitted
    one (a public attribute ending in ``_``) by its whole content, since its parameters do not
    say what it learned.
    """
    if hasattr(value, "get_params") and not isinstance(value, type):
        attributes = getattr(value, "__dict__", {})
        if any(name.endswith("_") and not name.startswith("_") for name in attributes):
            return ("fitted", tokenize(value, ensure_deterministic=False))
        kind = type(value)
        params = sorted(value.get_params(deep=False).items())
        return (
            kind.__module__,
            kind.__qualname__,
            tuple((name, estimator_spec(param)) for name, param in params),
        )
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(estimator_spec(item) for item in value))
    if isinstance(value, dict):
        return (
            "dict",
            tuple((key, estimator_spec(item)) for key, item in sorted(value.items(), key=repr)),
        )
    return value


def pipeline_stages(estimator, fit_params):
    """``(prefix steps, (final name, final step))`` of a pipeline that can share work, or None.

    Anything unusual — not a ``Pipeline``, a ``transform_input``, a step that cannot be an
    intermediate step, names scikit-learn would refuse, fit parameters that are not
    ``step__param`` — falls back to fitting the whole estimator in one task, where
    scikit-learn's own checks report the problem as that candidate's fit error.
    """
    from sklearn.pipeline import Pipeline

    if (
        not isinstance(estimator, Pipeline)
        or getattr(estimator, "transform_input", None) is not None
    ):
        return None
    steps = estimator.steps
    if not (
        isinstance(steps, list)
        and steps
        and all(isinstance(s, tuple) and len(s) == 2 for s in steps)
    ):
        return None
    names = [name for name, _ in steps]
    if len(set(names)) != len(names) or any(not isinstance(n, str) or "__" in n for n in names):
        return None
    if set(names) & set(estimator.get_params(deep=False)):
        return None
    if any("__" not in key or key.split("__", 1)[0] not in names for key in fit_params):
        return None
    final_name, final = steps[-1]
    if final is None or isinstance(final, str) or not hasattr(final, "fit"):
        return None
    for _, step in steps[:-1]:
        if _is_passthrough(step):
            continue
        if (
            isinstance(step, str)
            or not (hasattr(step, "fit") or hasattr(step, "fit_transform"))
            or not hasattr(step, "transform")
        ):
            return None
    return steps[:-1], (final_name, final)


def _is_passthrough(step):
    return step is None or (isinstance(step, str) and step == "passthrough")


def build(
    estimator,
    candidates,
    data_node,
    data_token,
    n_folds,
    fit_param_names,
    *,
    scorers,
    shortcut_scoring,
    return_train_score,
    error_score,
    pairwise,
):
    """The score tasks of every candidate × fold, and counts of the tasks by phase.

    Returns ``(nodes, counts)``: ``nodes[c][f]`` is the ``Delayed`` whose value is the result
    of candidate ``c`` on fold ``f`` (see :func:`~._grid_tasks.score_fit`).
    """
    from sklearn.base import clone

    raise_errors = error_score == "raise"
    split_name = key_name(PREFIX, data_token, phase="split")
    splits = [
        dask.delayed(_grid_tasks.split_fold, pure=True)(
            data_node, fold, pairwise, dask_key_name=(split_name, fold)
        )
        for fold in range(n_folds)
    ]
    built = {}
    counts = {"split": n_folds, "transform": 0, "fit": 0, "score": 0}
    scorer_token = tokenize(scorers, ensure_deterministic=False)
    nodes = []
    for params in candidates:
        candidate = clone(estimator).set_params(**clone(params, safe=False))
        stages = pipeline_stages(candidate, fit_param_names)
        if stages is None:
            prefix, (final_name, final), template = [], (None, candidate), None
        else:
            prefix, (final_name, final) = stages
            template = None if shortcut_scoring else candidate
        transform_test = template is None and stages is not None
        row = []
        for fold in range(n_folds):
            node, token = splits[fold], (data_token,)
            for name, step in prefix:
                if _is_passthrough(step):
                    continue
                token = (
                    token,
                    name,
                    estimator_spec(step),
                    return_train_score,
                    transform_test,
                    raise_errors,
                )
                key = (key_name(PREFIX, token, phase="transform"), fold)
                if key not in built:
                    built[key] = dask.delayed(_grid_tasks.fit_transform_step, pure=True)(
                        node,
                        name,
                        step,
                        return_train_score and transform_test,
                        transform_test,
                        raise_errors,
                        dask_key_name=key,
                    )
                    counts["transform"] += 1
                node = built[key]
            token = (token, final_name, estimator_spec(final), raise_errors)
            fit_key = (key_name(PREFIX, token, phase="fit"), fold)
            if fit_key not in built:
                built[fit_key] = dask.delayed(_grid_tasks.fit_final, pure=True)(
                    node, final_name, final, raise_errors, dask_key_name=fit_key
                )
                counts["fit"] += 1
            score_key = (
                key_name(
                    PREFIX,
                    token,
                    scorer_token,
                    estimator_spec(template),
                    return_train_score,
                    repr(error_score),
                    phase="score",
                ),
                fold,
            )
            if score_key not in built:
                built[score_key] = dask.delayed(_grid_tasks.score_fit, pure=True)(
                    built[fit_key],
                    node,
                    splits[fold] if template is not None else None,
                    template,
                    scorers,
                    return_train_score,
                    error_score,
                    dask_key_name=score_key,
                )
                counts["score"] += 1
            row.append(built[score_key])
        nodes.append(row)
    return nodes, counts


def place(data, client):
    """Context manager yielding ``(node, token)``: *data* as one graph key, scattered once.

    With a client the data is scattered under the ``search-data`` key and released on exit;
    without one it is a literal in the local graph. The token carries a fresh nonce: keys stay
    shared inside one search (prefixes fitted once per fold), but a search started right
    after another on the same data must not reuse keys the scheduler is still releasing
    (that cancelled the new search's tasks).
    """
    token = tokenize(
        data.X, data.y, data.fit_params, data.splits, uuid.uuid4().hex, ensure_deterministic=False
    )
    return _Placed(data, key_name(PREFIX, token, phase="data"), token, client)


class _Placed:
    def __init__(self, data, key, token, client):
        self.data, self.key, self.token, self.client, self.future = data, key, token, client, None

    def __enter__(self):
        if self.client is None:
            return dask.delayed(self.data, name=self.key, traverse=False), self.token
        self.future = self.client.scatter({self.key: self.data}, hash=False)[self.key]
        return self.future, self.token

    def __exit__(self, *exc):
        if self.future is not None:
            self.future.release()
        return False


def run(
    estimator,
    candidates,
    data,
    data_node,
    data_token,
    *,
    scorers,
    shortcut_scoring,
    return_train_score,
    error_score,
    pairwise,
    client,
    n_jobs,
    verbose,
):
    """Build the graph over *data* (a placed :class:`SearchData`), compute it.

    Returns ``(results, counts)``: one result dict per candidate × fold, candidate-major.
    """
    n_folds = len(data.splits)
    nodes, counts = build(
        estimator,
        candidates,
        data_node,
        data_token,
        n_folds,
        list(data.fit_params),
        scorers=scorers,
        shortcut_scoring=shortcut_scoring,
        return_train_score=return_train_score,
        error_score=error_score,
        pairwise=pairwise,
    )
    if verbose > 0:
        print(
            f"Fitting {n_folds} folds for each of {len(candidates)} candidates, totalling "
            f"{n_folds * len(candidates)} fits: {counts['transform']} pipeline-step fits, "
            f"{counts['fit']} final fits and {counts['score']} scorings as Dask tasks"
        )
    flat = [node for row in nodes for node in row]
    unique = list({node.key: node for node in flat}.values())
    by_key = dict(zip((node.key for node in unique), compute(unique, client, n_jobs)))
    return [by_key[node.key] for node in flat], counts


def refit(estimator, data_node, data_token, client, n_jobs):
    """Fit *estimator* on all the placed data in one ``search-refit`` task: (fitted, seconds)."""
    task = dask.delayed(_grid_tasks.refit, pure=True)(
        data_node,
        estimator,
        dask_key_name=key_name(PREFIX, data_token, estimator_spec(estimator), phase="refit"),
    )
    (result,) = compute([task], client, n_jobs)
    return result


def compute(nodes, client, n_jobs):
    """Compute *nodes* on the client, or on Dask's local threads with *n_jobs* of them."""
    if client is not None:
        return client.gather(client.compute(nodes))
    return list(dask.compute(*nodes, num_workers=_threads(n_jobs)))


def _threads(n_jobs):
    if n_jobs is None:
        return None
    if n_jobs < 0:
        return max(1, (os.cpu_count() or 1) + 1 + n_jobs)
    return max(1, int(n_jobs))
