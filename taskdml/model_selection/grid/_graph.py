"""The graph of a search over in-memory data: every candidate × fold as Dask tasks.

Work units are sized to the work (:func:`run`). A fit of a few milliseconds costs less than
the Dask task that runs it (about 3 ms here), so by default a first wave of one fit per
worker thread is timed (``search-probe`` tasks) and the other fits run in ``search-batch``
tasks of about :data:`TASK_SECONDS` each, a run of consecutive candidates on one fold, keyed
``(name, fold, first candidate, stop)``. A batch calls the same task functions in the same
order (:func:`~._grid_tasks.run_batch`), so its results are those of the graph below, and it
shares a fold's split and its candidates' common pipeline prefixes as the graph does. The
dask config ``taskdml.search.fits-per-task`` fixes the batch size (an int) or asks for the
graph below (``"steps"``); ``taskdml.search.task-seconds`` sets the target.

Layout of the one-task-per-step graph (keys from :func:`taskdml._keys.key_name`, default
prefix ``search``):

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
import numbers
import os
import uuid

import dask
from dask.base import tokenize

from taskdml._keys import key_name
from taskdml.model_selection.grid import _tasks as _grid_tasks

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


@dataclasses.dataclass(frozen=True)
class Job:
    """One candidate on one fold, as stages keyed like the graph's tasks.

    ``prefix`` holds ``(key, step name, step, score_train, transform_test)`` per pipeline step
    fitted before the last (:func:`~._grid_tasks.fit_transform_step`'s arguments); then the
    last step (or the whole estimator, ``final_name=None``) is fitted under ``fit_key`` and
    scored under ``score_key``, on the reassembled ``template`` pipeline where a scorer might
    look inside it.
    """

    prefix: tuple
    final_name: object
    final: object
    fit_key: tuple
    score_key: tuple
    template: object
    hooks: object = None  # the fit's scikit-learn callbacks (_grid_tasks.Hooks), if any


def plan(
    estimator,
    candidates,
    data_token,
    n_folds,
    fit_param_names,
    *,
    scorers,
    shortcut_scoring,
    return_train_score,
    error_score,
    hooks=None,
):
    """``jobs[c][f]``: the :class:`Job` of candidate ``c`` on fold ``f``.

    Keys are the graph's: candidates that agree on a pipeline prefix get the same prefix
    keys on a fold, identical candidates the same fit and score keys. With *hooks* (the
    :class:`~._grid_tasks.Hooks` of every candidate × fold, candidate-major) every fit is the
    whole estimator's under its own hooks, as in scikit-learn's ``_fit_and_score``: nothing
    is shared, so that every fit calls its callbacks.
    """
    from sklearn.base import clone

    raise_errors = error_score == "raise"
    scorer_token = tokenize(scorers, ensure_deterministic=False)
    split_name = key_name(PREFIX, data_token, phase="split")
    jobs = []
    for index, params in enumerate(candidates):
        candidate = clone(estimator).set_params(**clone(params, safe=False))
        stages = None if hooks else pipeline_stages(candidate, fit_param_names)
        if stages is None:
            prefix, (final_name, final), template = [], (None, candidate), None
        else:
            prefix, (final_name, final) = stages
            template = None if shortcut_scoring else candidate
        transform_test = template is None and stages is not None
        # A key's name chains the name before it: tokenized once per candidate, not per fold.
        name_so_far, steps = split_name, []
        for name, step in prefix:
            if _is_passthrough(step):
                continue
            name_so_far = key_name(
                PREFIX,
                name_so_far,
                name,
                estimator_spec(step),
                return_train_score,
                transform_test,
                raise_errors,
                phase="transform",
            )
            steps.append(
                (name_so_far, name, step, return_train_score and transform_test, transform_test)
            )
        token = (name_so_far, final_name, estimator_spec(final), raise_errors, hooks and index)
        fit_name = key_name(PREFIX, token, phase="fit")
        score_name = key_name(
            PREFIX,
            token,
            scorer_token,
            estimator_spec(template),
            return_train_score,
            repr(error_score),
            phase="score",
        )
        row = [
            Job(
                prefix=tuple(((key, fold), *rest) for key, *rest in steps),
                final_name=final_name,
                final=final,
                fit_key=(fit_name, fold),
                score_key=(score_name, fold),
                template=template,
                hooks=hooks[index * n_folds + fold] if hooks else None,
            )
            for fold in range(n_folds)
        ]
        jobs.append(row)
    return jobs


def build(jobs, data_node, data_token, *, scorers, return_train_score, error_score, pairwise):
    """One task per step of each :class:`Job` in *jobs* (``{(c, f): job}``), shared by key.

    Returns ``(nodes, counts)``: ``nodes[(c, f)]`` is the ``Delayed`` whose value is the
    result of candidate ``c`` on fold ``f`` (see :func:`~._grid_tasks.score_fit`).
    """
    raise_errors = error_score == "raise"
    split_name = key_name(PREFIX, data_token, phase="split")
    splits = {}
    built = {}
    counts = {"split": 0, "transform": 0, "fit": 0, "score": 0}
    nodes = {}
    for (candidate, fold), job in jobs.items():
        if fold not in splits:
            splits[fold] = dask.delayed(_grid_tasks.split_fold, pure=True)(
                data_node, fold, pairwise, dask_key_name=(split_name, fold)
            )
            counts["split"] += 1
        node = splits[fold]
        for key, name, step, score_train, transform_test in job.prefix:
            if key not in built:
                built[key] = dask.delayed(_grid_tasks.fit_transform_step, pure=True)(
                    node,
                    name,
                    step,
                    score_train,
                    transform_test,
                    raise_errors,
                    dask_key_name=key,
                )
                counts["transform"] += 1
            node = built[key]
        if job.fit_key not in built:
            built[job.fit_key] = dask.delayed(_grid_tasks.fit_final, pure=True)(
                node,
                job.final_name,
                job.final,
                raise_errors,
                job.hooks,
                dask_key_name=job.fit_key,
            )
            counts["fit"] += 1
        if job.score_key not in built:
            built[job.score_key] = dask.delayed(_grid_tasks.score_fit, pure=True)(
                built[job.fit_key],
                node,
                splits[fold] if job.template is not None else None,
                job.template,
                scorers,
                return_train_score,
                error_score,
                dask_key_name=job.score_key,
            )
            counts["score"] += 1
        nodes[candidate, fold] = built[job.score_key]
    return nodes, counts


def place(data, client):
    """Context manager yielding ``(node, token)``: *data* as one graph key, scattered once.

    With a client the data is scattered to every worker under the ``search-data`` key and
    released on exit; without one it is a literal in the local graph. The token carries a
    fresh nonce: keys stay shared inside one search (prefixes fitted once per fold), but a
    search started right after another on the same data must not reuse keys the scheduler
    is still releasing (that cancelled the new search's tasks).
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
        # To every worker: each task reads the whole key, and a first wave that found it on
        # one worker only ran there, one fit after the other, while the others fetched it.
        self.future = self.client.scatter({self.key: self.data}, hash=False, broadcast=True)[
            self.key
        ]
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
    hooks=None,
):
    """Plan every candidate × fold over *data* (a placed :class:`SearchData`), run it.

    *hooks*: the scikit-learn callbacks of every candidate × fold fit (see :func:`plan`).

    With the dask config ``taskdml.search.fits-per-task`` at ``"auto"`` (the default) a first
    wave of one fit per worker thread is timed, then the rest run in batches of
    :func:`fits_per_task` fits; an int fixes the batch size; ``"steps"`` runs one task per
    pipeline step, fit and scoring, with shared prefixes fitted once per fold.

    Returns ``(results, schedule)``: one result dict per candidate × fold, candidate-major,
    and what was decided (:func:`_schedule`).
    """
    n_folds, n_candidates = len(data.splits), len(candidates)
    jobs = plan(
        estimator,
        candidates,
        data_token,
        n_folds,
        list(data.fit_params),
        scorers=scorers,
        shortcut_scoring=shortcut_scoring,
        return_train_score=return_train_score,
        error_score=error_score,
        hooks=hooks,
    )
    common = dict(
        scorers=scorers,
        return_train_score=return_train_score,
        error_score=error_score,
        pairwise=pairwise,
    )
    setting = dask.config.get("taskdml.search.fits-per-task", "auto")
    target = float(dask.config.get("taskdml.search.task-seconds", TASK_SECONDS))
    order = [(c, f) for f in range(n_folds) for c in range(n_candidates)]
    schedule = _schedule(setting, target, len(order))
    if setting == "steps":
        nodes, counts = build(
            {job: jobs[job[0]][job[1]] for job in order}, data_node, data_token, **common
        )
        schedule.update(counts, tasks=sum(counts.values()))
        _announce(verbose, n_folds, n_candidates, schedule)
        flat = [nodes[c, f] for c in range(n_candidates) for f in range(n_folds)]
        unique = list({node.key: node for node in flat}.values())
        by_key = dict(zip((node.key for node in unique), compute(unique, client, n_jobs)))
        return [by_key[node.key] for node in flat], schedule
    results = {}
    if setting == "auto":
        n_threads = _n_threads(client, n_jobs)
        probes = probe_jobs(n_candidates, n_folds, n_threads)
        measured = run_batches(
            [[job] for job in probes],
            jobs,
            data_node,
            data_token,
            client,
            n_jobs,
            phase="probe",
            **common,
        )
        for job, outcome in zip(probes, measured):
            results[job] = outcome["results"][0]
        seconds = max((outcome["seconds"] for outcome in measured), default=0.0)
        rest = [job for job in order if job not in results]
        size = fits_per_task(seconds, target, len(rest), n_threads)
        schedule.update(probed=len(probes), seconds_per_fit=seconds, tasks=len(probes))
    else:
        rest, size = order, _check_size(setting)
    batches = group(rest, size)
    schedule.update(fits_per_task=size, tasks=schedule["tasks"] + len(batches))
    _announce(verbose, n_folds, n_candidates, schedule)
    done = run_batches(batches, jobs, data_node, data_token, client, n_jobs, **common)
    for batch, outcome in zip(batches, done):
        results.update(zip(batch, outcome["results"]))
    return [results[c, f] for c in range(n_candidates) for f in range(n_folds)], schedule


TASK_SECONDS = 0.1
"""Default of the dask config ``taskdml.search.task-seconds``: the work a batch aims at.

A Dask task costs about 3 ms of scheduler and worker time here (research/baselines.md, §2);
at 100 ms that is a few percent, and a batch is still short enough to balance the workers.
"""


def fits_per_task(seconds_per_fit, target, n_fits, n_threads):
    """How many fits one batch holds: about *target* seconds of them (rounded, so a batch runs
    between half and one and a half times *target*), one at least, and no more than would
    leave a worker thread without a batch."""
    by_time = max(1, round(target / seconds_per_fit)) if seconds_per_fit > 0 else n_fits
    by_threads = max(1, -(-n_fits // max(1, n_threads)))
    return max(1, min(by_time, by_threads))


def probe_jobs(n_candidates, n_folds, n_threads):
    """The first wave, one ``(candidate, fold)`` per worker thread: candidates spread over the
    list (their costs differ), on different folds."""
    if not n_candidates * n_folds:  # an empty CV: no fits, reported by the caller
        return []
    n_probes = max(1, min(n_threads, n_candidates * n_folds))
    return sorted(
        {(i * n_candidates // n_probes, i % n_folds) for i in range(n_probes)},
        key=lambda job: (job[1], job[0]),
    )


def group(order, size):
    """Batches of at most *size* ``(candidate, fold)`` jobs, each on one fold and a run of
    consecutive candidates (so that they share the fold's split and their common prefixes),
    evenly sized within a run."""
    runs = []
    for job in order:
        if runs and runs[-1][-1][1] == job[1] and runs[-1][-1][0] + 1 == job[0]:
            runs[-1].append(job)
        else:
            runs.append([job])
    batches = []
    for run_ in runs:
        n_batches = -(-len(run_) // size)
        bounds = [len(run_) * i // n_batches for i in range(n_batches + 1)]
        batches.extend(run_[a:b] for a, b in zip(bounds, bounds[1:]))
    return batches


def run_batches(batches, jobs, data_node, data_token, client, n_jobs, *, phase="batch", **common):
    """Run each batch as one ``search-<phase>`` task keyed ``(name, fold, first, stop)``:
    its fold and its candidates ``first`` to ``stop - 1``, as the dashboard shows them."""
    name = key_name(PREFIX, data_token, phase=phase)
    arguments = [
        (
            (name, batch[0][1], batch[0][0], batch[-1][0] + 1),
            [(fold, jobs[candidate][fold]) for candidate, fold in batch],
        )
        for batch in batches
    ]
    extra = (common["pairwise"], common["scorers"], common["return_train_score"])
    if client is not None:
        futures = [
            client.submit(
                _grid_tasks.run_batch,
                data_node,
                work,
                *extra,
                common["error_score"],
                key=key,
                pure=False,
            )
            for key, work in arguments
        ]
        return client.gather(futures)
    nodes = [
        dask.delayed(_grid_tasks.run_batch, pure=True)(
            data_node, work, *extra, common["error_score"], dask_key_name=key
        )
        for key, work in arguments
    ]
    return compute(nodes, None, n_jobs)


def _schedule(setting, target, n_fits):
    """The record of how a search's fits were cut into tasks (the search's ``_schedule``)."""
    return {
        "setting": setting,
        "target_seconds": target,
        "fits": n_fits,
        "probed": 0,
        "seconds_per_fit": None,
        "fits_per_task": 1,
        "tasks": 0,
    }


def _check_size(setting):
    if isinstance(setting, numbers.Integral) and not isinstance(setting, bool) and setting >= 1:
        return int(setting)
    raise ValueError(
        "the dask config 'taskdml.search.fits-per-task' must be 'auto', 'steps' or an int >= 1, "
        f"got {setting!r}; e.g. dask.config.set({{'taskdml.search.fits-per-task': 'auto'}})."
    )


def _n_threads(client, n_jobs):
    if client is not None:
        return sum(client.nthreads().values())
    return _threads(n_jobs) or os.cpu_count() or 1


def _announce(verbose, n_folds, n_candidates, schedule):
    if verbose > 0:
        print(
            f"Fitting {n_folds} folds for each of {n_candidates} candidates, totalling "
            f"{n_folds * n_candidates} fits in {schedule['tasks']} Dask tasks"
        )


def refit(estimator, data_node, data_token, client, n_jobs, hooks=None):
    """Fit *estimator* on all the placed data in one ``search-refit`` task: (fitted, seconds).

    *hooks*: the refit's scikit-learn callbacks (:class:`~._grid_tasks.Hooks`), if any.
    """
    task = dask.delayed(_grid_tasks.refit, pure=hooks is None)(
        data_node,
        estimator,
        hooks,
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
