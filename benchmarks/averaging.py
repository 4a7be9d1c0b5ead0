"""The averaging gap: sync replicas against the serial ``partial_fit`` loop at equal epochs.

Issue 25 asked whether model averaging costs accuracy against a serial pass over the same
chunks for the same number of epochs (one site-table run had shown -1.8 points at 5 epochs),
and whether what the literature proposes closes it. For every linear SGD family, this script
trains, on the same 8 chunks in the same order:

``serial``      scikit-learn's ``partial_fit`` over the chunks, epoch after epoch (written
                here);
``taskdml``     :func:`taskdml.parallel.train` with ``strategy="sync"``, ``sync_every=1``,
                ``n_replicas`` R, ``shuffle=False`` (threads, ``client=False``: the merge
                arithmetic is the engine's; ``tests/parallel/test_reference.py`` shows the
                cluster path equals it bit for bit): chunk i to replica i mod R, the rows-seen
                average of the replicas each round, ``t_`` the global row count;
``larger steps``  the start plus the *sum* of the replicas' changes (each replica's step
                counted whole, as a serial pass would add them; the MLP's compensation is of
                this kind), written here;
``schedule``    taskdml's average, but replica k starts its round with ``t_`` advanced by the
                rows of replicas 0..k-1 this round, the count a serial pass would have reached
                at that chunk (the learning-rate schedule within a round), written here.

Each configuration runs with ``--seeds`` estimator seeds (SGD shuffles the rows of a chunk
with it); reported: the serial loop's mean score and spread over seeds, and per R the mean
difference from the serial loop in points (accuracy, or R² × 100) with the smallest and
largest over seeds. Nothing asserts.

``python benchmarks/averaging.py`` rewrites its block of ``benchmarks/RESULTS.md``.
"""

import argparse
import copy
import datetime
import time
import warnings

import _results
import numpy as np

PACKAGES = ("taskdml", "dask", "scikit-learn", "numpy")
N_CHUNKS = 8


def datasets():
    """``(name, task, X_train, X_test, y_train, y_test)``, features scaled on the training
    split (and the site table's category one-hot encoded)."""
    from parity import site_table
    from sklearn.compose import make_column_transformer
    from sklearn.datasets import make_classification, make_regression
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    table, y = site_table()
    split = train_test_split(table, y, test_size=0.25, random_state=0, stratify=y)
    encode = make_column_transformer(
        (OneHotEncoder(), ["site"]), remainder=StandardScaler(), sparse_threshold=0
    ).fit(split[0])
    found = [("site table 18,000 x 31", "classification", *_encoded(encode, *split))]
    X, y = make_classification(
        100_000, 20, n_informative=10, flip_y=0.05, class_sep=0.8, random_state=0
    )
    found.append(("synthetic 100,000 x 20", "classification", *_scaled(X, y)))
    X, y = make_regression(100_000, 20, n_informative=10, noise=10.0, random_state=0)
    found.append(("synthetic regression 100,000 x 20", "regression", *_scaled(X, y)))
    return found


def _encoded(encode, X_train, X_test, y_train, y_test):
    return encode.transform(X_train), encode.transform(X_test), y_train, y_test


def _scaled(X, y):
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)
    scaler = StandardScaler().fit(X_train)
    return scaler.transform(X_train), scaler.transform(X_test), y_train, y_test


def estimators(task):
    from sklearn.linear_model import Perceptron, SGDClassifier, SGDRegressor

    if task == "classification":
        return [
            ("SGDClassifier(hinge)", SGDClassifier()),
            ("SGDClassifier(log_loss)", SGDClassifier(loss="log_loss")),
            ("SGDClassifier(modified_huber)", SGDClassifier(loss="modified_huber")),
            ("Perceptron", Perceptron()),
        ]
    return [
        ("SGDRegressor(squared_error)", SGDRegressor()),
        ("SGDRegressor(huber)", SGDRegressor(loss="huber")),
    ]


def _partial_fit(estimator, X, y, classes):
    if classes is None:
        estimator.partial_fit(X, y)
    else:
        estimator.partial_fit(X, y, classes=classes)


def serial(estimator, chunks, classes, epochs):
    """scikit-learn's ``partial_fit`` over the chunks in order, *epochs* times."""
    from sklearn.base import clone

    estimator = clone(estimator)
    for _ in range(epochs):
        for X, y in chunks:
            _partial_fit(estimator, X, y, classes)
    return estimator


def alternative(estimator, chunks, classes, epochs, n_replicas, how):
    """Sync replicas with a merge written here: ``how`` is ``"larger steps"`` (start plus the
    sum of the replicas' changes) or ``"schedule"`` (rows-seen average; replica k's ``t_``
    advanced within the round by the rows of the replicas before it)."""
    from sklearn.base import clone

    model = None
    owned = [chunks[rank::n_replicas] for rank in range(n_replicas)]
    for _ in range(epochs):
        for round_ in range(max(len(mine) for mine in owned)):
            replicas, rows, ahead = [], [], 0
            for mine in owned:
                if round_ >= len(mine):
                    continue
                X, y = mine[round_]
                replica = clone(estimator) if model is None else copy.deepcopy(model)
                if model is not None and how == "schedule":
                    replica.t_ += ahead
                _partial_fit(replica, X, y, classes)
                if model is not None and how == "schedule":
                    replica.t_ -= ahead
                ahead += len(X)
                replicas.append(replica)
                rows.append(len(X))
            model = _merge(model, replicas, rows, how)
    return model


def _merge(start, replicas, rows, how):
    merged = copy.deepcopy(replicas[0])
    t0 = 1.0 if start is None else start.t_
    merged.t_ = t0 + sum(replica.t_ - t0 for replica in replicas)
    for name in ("coef_", "intercept_"):
        values = [np.asarray(getattr(replica, name), dtype=float) for replica in replicas]
        if how == "larger steps" and start is not None:
            origin = np.asarray(getattr(start, name), dtype=float)
            value = origin + sum(v - origin for v in values)
        else:  # the first round starts from nothing to add changes to: its average
            value = sum(n / sum(rows) * v for n, v in zip(rows, values))
        setattr(merged, name, value)
    return merged


def ours(estimator, chunks, classes, epochs, n_replicas):
    import dask.array as da

    from taskdml.parallel import train

    X = da.concatenate([da.from_array(X) for X, _ in chunks])
    y = da.concatenate([da.from_array(y) for _, y in chunks])
    return train(
        estimator, X, y, classes=classes, strategy="sync", n_replicas=n_replicas,
        sync_every=1, epochs=epochs, shuffle=False, client=False,
    ).estimator  # fmt: skip


def measure(args):
    from sklearn.base import clone, is_classifier

    rows = []
    for data, task, X_train, X_test, y_train, y_test in datasets():
        bounds = np.linspace(0, len(X_train), N_CHUNKS + 1).astype(int)
        y_train = np.asarray(y_train)
        chunks = [(X_train[a:b], y_train[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        for family, estimator in estimators(task):
            classes = np.unique(y_train) if is_classifier(estimator) else None
            for epochs in args.epochs:
                row = {"family": family, "data": data, "epochs": epochs, "serial": []}
                for seed in range(args.seeds):
                    seeded = clone(estimator).set_params(random_state=seed)
                    reference = serial(seeded, chunks, classes, epochs).score(X_test, y_test)
                    row["serial"].append(reference)
                    for n_replicas in args.replicas:
                        for how in ("taskdml", "larger steps", "schedule"):
                            if how == "taskdml":
                                model = ours(seeded, chunks, classes, epochs, n_replicas)
                            else:
                                model = alternative(
                                    seeded, chunks, classes, epochs, n_replicas, how
                                )
                            diff = 100 * (model.score(X_test, y_test) - reference)
                            row.setdefault((how, n_replicas), []).append(diff)
                rows.append(row)
                print(_line(row, args.replicas), flush=True)
    return rows


def _spread(diffs):
    return f"{np.mean(diffs):+.2f} [{min(diffs):+.2f}, {max(diffs):+.2f}]"


def _line(row, replicas):
    parts = [f"{row['family']:30} {row['data']:34} e={row['epochs']}"]
    parts.append(f"serial {np.mean(row['serial']):.4f}")
    for n_replicas in replicas:
        for how in ("taskdml", "larger steps", "schedule"):
            parts.append(f"R{n_replicas} {how} {_spread(row[(how, n_replicas)])}")
    return " | ".join(parts)


def report(rows, facts, replicas):
    lines = [
        *_results.header(facts),
        "",
        f"{N_CHUNKS} chunks in order, {facts['seeds']} estimator seeds. *serial*: the "
        "`partial_fit` loop's mean score (accuracy, or R²) ± its standard deviation over "
        "seeds; each other cell: the mean difference from the serial loop of the same seed in "
        "points (R² × 100), [smallest, largest] over seeds. *taskdml*: what the engine does "
        "(rows-seen average, global `t_`); *larger steps*: start + the sum of the replicas' "
        "changes; *schedule*: the average, with each replica's `t_` advanced within the round "
        "as a serial pass would have it.",
        "",
    ]
    header = "| family | data | epochs | serial |"
    rule = "|---|---|---|---|"
    for n_replicas in replicas:
        for how in ("taskdml", "larger steps", "schedule"):
            header += f" R={n_replicas} {how} |"
            rule += "---|"
    lines += [header, rule]
    for row in rows:
        cells = (
            f"| {row['family']} | {row['data']} | {row['epochs']} "
            f"| {np.mean(row['serial']):.4f} ± {np.std(row['serial']):.4f} |"
        )
        for n_replicas in replicas:
            for how in ("taskdml", "larger steps", "schedule"):
                cells += f" {_spread(row[(how, n_replicas)])} |"
        lines.append(cells)
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, nargs="*", default=[1, 5])
    parser.add_argument("--replicas", type=int, nargs="*", default=[2, 4, 8])
    parser.add_argument("--out", default=_results.RESULTS, help="markdown file to update")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning: fixed epochs on purpose
        rows = measure(args)
    facts = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "command": "python benchmarks/averaging.py",
        "machine": _results.machine(),
        "versions": _results.versions(PACKAGES),
        "seeds": args.seeds,
        "wall_s": time.perf_counter() - began,
    }
    text = report(rows, facts, args.replicas)
    print(text)
    if not args.no_write:
        title = "The averaging gap at equal epochs (`benchmarks/averaging.py`)"
        _results.write_section(args.out, text, "averaging.py", title)


if __name__ == "__main__":
    main()
