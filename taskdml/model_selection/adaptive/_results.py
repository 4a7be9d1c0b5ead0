"""What an adaptive search leaves behind: the best trial, ``cv_results_``, ``trials_``.

Trials are ranked by the budget they reached, then by their score at it (a score after one
epoch is not comparable with one after 27); failed trials come last.
"""

import numpy as np

RESERVED = {
    "trial",
    "bracket",
    "params",
    "budget",
    "epochs",
    "rung",
    "score",
    "std_score",
    "state",
    "error",
    "fit_time",
    "steps",
    "time",
}


def best_trial(trials):
    """The best of the trials that went furthest (budget, then score, then the first)."""
    scored = [t for t in trials if t.status != "failed" and t.rung >= 0]
    return max(scored, key=lambda t: (t.budget, _finite(t.scores[t.rung]), -t.id))


def _finite(score):
    return score if np.isfinite(score) else -np.inf


def _rank(trials):
    """``rank_test_score``: by budget reached, then score; failed trials last; ties share."""
    keys = [
        (-1, -np.inf)
        if t.status == "failed" or t.rung < 0
        else (t.budget, _finite(t.scores[t.rung]))
        for t in trials
    ]
    ordered = sorted(set(keys), reverse=True)
    position, ranks = 1, {}
    for key in ordered:
        ranks[key] = position
        position += keys.count(key)
    return np.array([ranks[key] for key in keys], dtype=np.int32)


def cv_results(trials, error_score, n_folds, with_splits, with_bracket):
    from numpy import ma

    def final(trial):
        return (
            error_score if trial.status == "failed" or trial.rung < 0 else trial.scores[trial.rung]
        )

    results = {"params": [t.params for t in trials]}
    names = sorted({name for t in trials for name in t.params})
    for name in names:
        column = ma.masked_all(len(trials), dtype=object)
        for i, t in enumerate(trials):
            if name in t.params:
                column[i] = t.params[name]
        results[f"param_{name}"] = column
    scores = np.array([final(t) for t in trials], dtype=float)
    if with_splits:
        for k in range(n_folds):
            results[f"split{k}_test_score"] = np.array(
                [
                    t.fold_scores[k] if t.fold_scores and t.status != "failed" else error_score
                    for t in trials
                ],
                dtype=float,
            )
    results["mean_test_score"] = scores
    results["std_test_score"] = np.array(
        [
            np.std(t.fold_scores) if t.fold_scores and t.status != "failed" else np.nan
            for t in trials
        ]
    )
    results["rank_test_score"] = _rank(trials)
    results["test_score"] = scores
    results["budget"] = np.array([t.budget for t in trials])
    results["rung"] = np.array([t.rung for t in trials])
    results["state"] = np.array([t.status for t in trials], dtype=object)
    results["mean_fit_time"] = np.array([t.fit_time for t in trials])
    if with_bracket:
        results["bracket"] = np.array([t.bracket for t in trials])
    return results


def trial_records_frame(trials, with_bracket):
    """The fitted ``trials_`` DataFrame, built from the driver's ``Trial`` records.

    One row per trial: its id (and bracket), its parameters (as columns, prefixed ``param_``
    where a name is one of the table's own columns), ``params``, the budget and rung reached,
    the score there and its spread over folds, the score at every rung, the state, the error,
    the fit time and when it ended. :func:`taskdml.model_selection.trials_frame` reads a
    fitted search (any kind) instead.
    """
    import pandas as pd

    rows = []
    n_rungs = max(len(t.budgets) for t in trials)
    for t in trials:
        row = {"trial": t.id}
        if with_bracket:
            row["bracket"] = t.bracket
        for name, value in t.params.items():
            row[f"param_{name}" if name in RESERVED else name] = value
        scored = t.fold_scores and t.status != "failed"
        row.update(
            params=t.params,
            budget=t.budget,
            rung=t.rung,
            score=t.scores.get(t.rung, np.nan),
            std_score=float(np.std(t.fold_scores)) if scored else np.nan,
        )
        for k in range(n_rungs):
            row[f"score_rung_{k}"] = t.scores.get(k, np.nan)
        row.update(
            state=t.status, error=t.error, fit_time=t.fit_time, steps=_steps(t), time=t.ended
        )
        rows.append(row)
    return pd.DataFrame(rows)


def _steps(trial):
    return ", ".join(
        f"{mode} x{replicas}" if replicas > 1 else mode for mode, replicas in trial.steps
    )


def all_failed_message(search, trials):
    errors = {}
    for trial in trials:
        errors.setdefault(trial.error, []).append(trial.id)
    listing = "\n".join(
        f"  {error} ({'trial' if len(ids) == 1 else 'trials'} {', '.join(map(str, ids))})"
        for error, ids in errors.items()
    )
    return (
        f"All {len(trials)} trials of {type(search).__name__} failed, so there is no best "
        f"candidate. The errors:\n{listing}\nFix the estimator or the parameter space; with "
        "error_score='raise' the first error is raised with its traceback."
    )


MODEL_HISTORY_FIELDS = (
    "model_id",
    "params",
    "partial_fit_calls",
    "partial_fit_time",
    "score",
    "score_time",
    "elapsed_wall_time",
)
"""The fields of dask-ml's ``model_history_`` records (Hyperband's add ``bracket``)."""


def model_history(history, model_ids, with_bracket):
    """dask-ml's ``model_history_``: ``{model_id: [record per score, in order]}``.

    Every trial that started has a key (a failed step's record has a NaN score); the records
    hold :data:`MODEL_HISTORY_FIELDS` (and ``bracket``), read from the ``history_`` events.
    """
    fields = MODEL_HISTORY_FIELDS + (("bracket",) if with_bracket else ())
    records = {}
    for event in history:
        records.setdefault(model_ids[event["trial"]], []).append(
            {field: event[field] for field in fields}
        )
    return records
