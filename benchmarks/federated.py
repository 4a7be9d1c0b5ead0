"""Federated training on non-IID silos: FedAvg against centralized training and each silo
alone, with secure aggregation and with client-level differential privacy.

The data is scikit-learn's digits (1,797 images of 8×8 pixels, 10 classes; bundled, so it
runs offline), scaled to [0, 1]: a stratified 20 % is held out on the coordinator for
scoring, the rest is split across 3 silos three ways:

- *IID*: a random third each (the reference);
- *label-skewed*: each class's rows divided among the silos by proportions drawn from
  Dirichlet(0.3), so each silo holds mostly a few digits;
- *size-skewed*: random rows, 70 % / 20 % / 10 %.

Each silo is one worker process of a ``LocalCluster(n_workers=3, threads_per_worker=1)``; its
loader runs there and computes its own rows (the coordinator never holds them). The model is
``SGDClassifier(loss="log_loss", alpha=1e-3)`` on chunks of 50 rows. Compared, with the same
number of passes over the data (``--rounds``):

- *centralized*: ``partial_fit`` over all the training rows pooled in random order (chunks
  of 50), ``rounds`` epochs;
- *best / worst silo alone*: one silo's chunks only, ``rounds`` epochs;
- *FedAvg*: :func:`taskdml.parallel.train_federated`, ``rounds`` rounds of 1 local epoch,
  and of 3 local epochs (more local work between merges);
- *FedAvg + secure aggregation*: the same with pairwise masks (accuracy and seconds per round);
- *FedAvg + DP*: clip norm 5, noise multipliers 0.03 to 1, δ = 1e-5; ε from dp-accounting.

Accuracy is on the held-out rows, the mean over ``--seeds`` seeds (which change the split,
the model's seed and the DP noise). ``python benchmarks/federated.py`` rewrites its block of
``benchmarks/RESULTS.md``; ``--quick`` is a smoke run that prints only.
"""

import argparse
import copy
import datetime
import statistics
import time

import _results
import numpy as np
from distributed import Client, LocalCluster
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import train_test_split

from taskdml.parallel import Silo, train_federated

PACKAGES = ("taskdml", "dask", "distributed", "scikit-learn", "numpy", "dp-accounting")
SPLITS = ("IID", "label-skewed", "size-skewed")
N_SILOS = 3
CHUNK = 50
CLIP = 5.0
SIGMAS = (0.03, 0.1, 0.3, 1.0)
DELTA = 1e-5


def _train_test(seed):
    digits = load_digits()
    return train_test_split(
        digits.data / 16.0, digits.target, test_size=0.2, stratify=digits.target, random_state=seed
    )


def silo_rows(split, seed):
    """The training rows of each silo: a list of index arrays."""
    _, _, y, _ = _train_test(seed)
    rng = np.random.default_rng(seed)
    if split == "label-skewed":
        parts = [[] for _ in range(N_SILOS)]
        for label in np.unique(y):
            rows = rng.permutation(np.flatnonzero(y == label))
            cuts = (np.cumsum(rng.dirichlet([0.3] * N_SILOS))[:-1] * len(rows)).astype(int)
            for part, piece in zip(parts, np.split(rows, cuts)):
                part.append(piece)
        return [rng.permutation(np.concatenate(p)) for p in parts]
    shares = (0.7, 0.2, 0.1) if split == "size-skewed" else (1 / 3, 1 / 3, 1 / 3)
    rows = rng.permutation(len(y))
    cuts = (np.cumsum(shares)[:-1] * len(rows)).astype(int)
    return np.split(rows, cuts)


def load_silo(split, seed, index):
    """Silo *index*'s chunks; runs on the silo's worker."""
    X, _, y, _ = _train_test(seed)
    rows = silo_rows(split, seed)[index]
    return [(X[rows[i : i + CHUNK]], y[rows[i : i + CHUNK]]) for i in range(0, len(rows), CHUNK)]


def model(seed):
    return SGDClassifier(loss="log_loss", alpha=1e-3, random_state=seed)


def serial(seed, chunks, epochs):
    estimator = model(seed)
    for _ in range(epochs):
        for X, y in chunks:
            estimator.partial_fit(X, y, classes=np.arange(10))
    return estimator


def one_split(client, workers, split, seed, rounds):
    """{method: (accuracy, seconds per round, epsilon)} for one split and seed."""
    _, X_test, _, y_test = _train_test(seed)
    chunks = [load_silo(split, seed, i) for i in range(N_SILOS)]  # the baselines only
    X, _, y, _ = _train_test(seed)
    rows = np.random.default_rng(seed).permutation(len(y))  # all rows pooled, in random order
    pooled = [(X[rows[i : i + CHUNK]], y[rows[i : i + CHUNK]]) for i in range(0, len(y), CHUNK)]
    out = {"centralized": (serial(seed, pooled, rounds).score(X_test, y_test), None)}
    alone = [serial(seed, c, rounds).score(X_test, y_test) for c in chunks]
    out["best silo alone"], out["worst silo alone"] = (max(alone), None), (min(alone), None)
    silos = [
        Silo(f"silo{i}", load_silo, {"split": split, "seed": seed, "index": i}, workers=[w])
        for i, w in enumerate(workers)
    ]
    runs = {
        "FedAvg, 1 local epoch": {},
        "FedAvg, 3 local epochs": {"local_epochs": 3},
        "FedAvg + secure aggregation": {"secure_aggregation": True},
    }
    for sigma in SIGMAS:
        dp = {"clip_norm": CLIP, "noise_multiplier": sigma, "delta": DELTA}
        runs[f"FedAvg + DP σ={sigma}"] = {"dp": dp, "secure_aggregation": True}
    for name, options in runs.items():
        began = time.perf_counter()
        result = train_federated(
            model(seed),
            silos,
            rounds=rounds,
            classes=np.arange(10),
            client=client,
            random_state=seed,
            **options,
        )
        seconds = (time.perf_counter() - began) / rounds
        epsilon = result.privacy["epsilon"] if result.privacy else None
        out[name] = (result.estimator.score(X_test, y_test), seconds, epsilon)
    return out


def report(table, facts):
    lines = [
        f"Run {facts['date']} with `{facts['command']}`.  ",
        f"Machine: {_results.machine_line(facts['machine'])}  ",
        f"Versions: {_results.versions_line(facts['versions'])}",
        "",
        f"Digits, {N_SILOS} silos (one worker process each), {facts['rounds']} rounds "
        f"(= epochs for the baselines), held-out accuracy, mean of {facts['seeds']} seeds. "
        f"DP: clip norm {CLIP}, δ = {DELTA}, ε from dp-accounting's RDP accountant "
        f"({facts['rounds']} Gaussian rounds, every silo in every round).",
        "",
        "| method | " + " | ".join(SPLITS) + " | s per round | ε |",
        "| --- | " + " | ".join("---:" for _ in SPLITS) + " | ---: | ---: |",
    ]
    for method in table[SPLITS[0]]:
        accuracy = [statistics.mean(a for a, *_ in table[split][method]) for split in SPLITS]
        seconds = [s for split in SPLITS for _, s, *_ in table[split][method] if s is not None]
        epsilons = [r[2] for r in table[SPLITS[0]][method] if len(r) > 2 and r[2] is not None]
        cells = [f"{a:.3f}" for a in accuracy]
        cells.append(f"{statistics.median(seconds):.3f}" if seconds else "–")
        cells.append(f"{statistics.mean(epsilons):.3g}" if epsilons else "–")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds (epochs of baselines)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds averaged")
    parser.add_argument("--quick", action="store_true", help="a smoke run that prints only")
    parser.add_argument("--out", default=_results.RESULTS, help="markdown file to update")
    args = parser.parse_args(argv)
    rounds, seeds = (3, 1) if args.quick else (args.rounds, args.seeds)
    facts = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "command": "python benchmarks/federated.py" + (" --quick" if args.quick else ""),
        "machine": _results.machine(),
        "versions": _results.versions(PACKAGES),
        "rounds": rounds,
        "seeds": seeds,
    }
    table = {split: {} for split in SPLITS}
    with (
        LocalCluster(
            n_workers=N_SILOS, threads_per_worker=1, host="127.0.0.1", dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        for split in SPLITS:
            for seed in range(seeds):
                for method, row in one_split(client, workers, split, seed, rounds).items():
                    table[split].setdefault(method, []).append(copy.copy(row))
    text = report(table, facts)
    print(text)
    if not args.quick:
        title = "Federated training on non-IID silos (`benchmarks/federated.py`)"
        _results.write_section(args.out, text, "federated.py", title)


if __name__ == "__main__":
    main()
