"""What a search leaves behind: the trials table and a picture of the trials.

Both read the search's public results only: ``trials_`` and ``history_`` for the incremental
searches, ``cv_results_`` for grid and random search, so they work for every search class.
"""

import numpy as np
import pandas as pd


def trials_frame(search):
    """One row per trial of a fitted search: parameters, budget reached, scores, state.

    Parameters
    ----------
    search : fitted search
        Any of taskdml's searches: the adaptive ones give their ``trials_`` (without the
        ``params`` column), the grid searches a table built from ``cv_results_``.

    Returns
    -------
    pandas.DataFrame
        Columns ``trial``, one per parameter, ``score``, ``std_score`` and ``state``, plus
        ``rank`` and ``budget`` (the number of folds) for the grid searches, or the adaptive
        searches' own columns (``budget``, ``rung``, ``score_rung_<k>``, ``error``, ...).

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.linear_model import LogisticRegression
    >>> from taskdml.model_selection import GridSearchCV, trials_frame
    >>> search = GridSearchCV(LogisticRegression(max_iter=300), {"C": [0.1, 1.0]}, cv=3)
    >>> frame = trials_frame(search.fit(*load_iris(return_X_y=True)))
    >>> frame[["trial", "C", "state"]].values.tolist()
    [[0, 0.1, 'completed'], [1, 1.0, 'completed']]
    """
    if getattr(search, "trials_", None) is not None:
        return (
            pd.DataFrame(search.trials_)
            .drop(columns=["params"], errors="ignore")
            .reset_index(drop=True)
        )
    results = search.cv_results_
    score = (
        "mean_test_score"
        if "mean_test_score" in results
        else next(key for key in results if key.startswith("mean_test_"))
    )
    frame = pd.DataFrame({"trial": range(len(results["params"]))})
    for key in (k for k in results if k.startswith("param_")):
        frame[key.removeprefix("param_")] = [None if v is np.ma.masked else v for v in results[key]]
    frame["score"] = results[score]
    frame["std_score"] = results[score.replace("mean_", "std_")]
    frame["rank"] = results[score.replace("mean_", "rank_")]
    frame["budget"] = getattr(search, "n_splits_", None)
    frame["state"] = np.where(np.isfinite(results[score]), "completed", "failed")
    return frame


def plot_trials(search, path):
    """Save a PNG: score against budget per trial, and score against each parameter.

    The figure is built with matplotlib's object API (:class:`matplotlib.figure.Figure`), not
    pyplot: the user's backend and pyplot's figures are left alone.

    Parameters
    ----------
    search : fitted search
        Any of taskdml's searches (read through :func:`trials_frame` and ``history_``).
    path : str or path-like
        Where the PNG is written.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.linear_model import LogisticRegression
    >>> from taskdml.model_selection import GridSearchCV, plot_trials
    >>> search = GridSearchCV(LogisticRegression(max_iter=300), {"C": [0.1, 1.0]}, cv=3)
    >>> search = search.fit(*load_iris(return_X_y=True))
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "trials.png"
    >>> plot_trials(search, path)
    >>> path.read_bytes()[1:4]
    b'PNG'
    """
    from matplotlib.figure import Figure

    frame = trials_frame(search)
    parameters = [
        c for c in frame.columns if c not in _NOT_PARAMETERS and not c.startswith("score_")
    ]
    columns = 1 + max(1, len(parameters))
    figure = Figure(figsize=(4.2 * columns, 3.6))
    axes = figure.subplots(1, columns, squeeze=False)
    _budget_panel(axes[0][0], search, frame)
    for axis, name in zip(axes[0][1:], parameters):
        _parameter_panel(axis, frame, name)
    figure.suptitle(f"{type(search).__name__}: {len(frame)} trials", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


_NOT_PARAMETERS = {
    "trial",
    "score",
    "std_score",
    "rank",
    "budget",
    "state",
    "error",
    "rung",
    "bracket",
    "epochs",
    "time",
    "fit_time",
    "params",
}


def _budget_panel(axis, search, frame):
    history = getattr(search, "history_", None)
    if history is not None and len(history):
        history = pd.DataFrame(history)
        budget = "epochs" if "epochs" in history else "budget"
        for _, steps in history.groupby("trial"):
            axis.plot(
                steps[budget], steps["score"], marker="o", markersize=3, linewidth=1, alpha=0.7
            )
        axis.set_xlabel(budget)
        axis.set_xscale(
            "log" if history[budget].max() > 8 * max(history[budget].min(), 1) else "linear"
        )
        axis.set_title("score against budget, per trial", fontsize=9)
    else:
        ordered = frame.sort_values("score", ascending=False)
        axis.bar(range(len(ordered)), ordered["score"], yerr=ordered["std_score"], color="tab:blue")
        axis.set_xlabel("candidates, best first")
        axis.set_title("cross-validated score", fontsize=9)
    axis.set_ylabel("score")


def _parameter_panel(axis, frame, name):
    values, scores = frame[name], frame["score"]
    numeric = pd.to_numeric(values, errors="coerce")
    if numeric.notna().all():
        axis.scatter(numeric, scores, s=18, alpha=0.8)
        positive = numeric[numeric > 0]
        if len(positive) == len(numeric) and positive.max() / positive.min() > 100:
            axis.set_xscale("log")
    else:
        labels = sorted(values.astype(str).unique())
        positions = values.astype(str).map({label: i for i, label in enumerate(labels)})
        jitter = np.random.default_rng(0).uniform(-0.15, 0.15, len(positions))
        axis.scatter(positions + jitter, scores, s=18, alpha=0.8)
        axis.set_xticks(range(len(labels)), labels)
    axis.set_xlabel(name)
    axis.set_title(f"score against {name}", fontsize=9)
