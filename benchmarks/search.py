"""Hyperparameter searches side by side with their peers, in one process run.

(a) Grid search on digits: ``Pipeline(StandardScaler, PCA(random_state=0),
    SGDClassifier(random_state=0))``, ``pca__n_components`` in {16, 32} x
    ``sgdclassifier__alpha`` in logspace(-6, -1, 6), ``KFold(5)``: scikit-learn
    GridSearchCV (n_jobs=1, n_jobs=2/loky), dask-ml GridSearchCV (if it imports) and
    taskdml GridSearchCV, the last two on the cluster. One untimed warm-up per method, then
    the median of ``--repeats`` timed runs.
(b) Adaptive search on synthetic data (``taskdml.datasets.make_classification``, 50 features,
    20 informative, 10 redundant, 16 chunks, 20 % holdout):
    ``SGDClassifier(loss="log_loss", random_state=0)`` over alpha ~ loguniform(1e-7, 1e-2),
    penalty in {l2, l1, elasticnet}, l1_ratio ~ uniform(0, 1): scikit-learn
    HalvingRandomSearchCV (n_jobs=2, one ShuffleSplit, resource n_samples) on the in-memory
    train array; taskdml HyperbandSearchCV(max_iter=27) and ASHASearchCV(max_epochs=27) with
    ``parallel={"strategy": "sync"}`` on the persisted dask arrays. One run each.

The cluster is a LocalCluster of ``--workers`` single-threaded worker processes on 127.0.0.1.
Worker busy fraction = sum of the task stream's ``compute`` intervals (clipped to the run)
over wall time x workers. Other processes' CPU use during the timed part is measured
(system busy CPU minus this process tree's) and reported.

    python benchmarks/search.py                       # ~4-5 min on 2 cores; appends to RESULTS.md
    python benchmarks/search.py --n-samples 100000 --no-write   # smoke run
"""

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import psutil

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


# --------------------------------------------------------------------------------------------
# Load measurement


class Load:
    """CPU seconds used by processes outside this process tree between start() and stop()."""

    def _tree_cpu(self):
        total = 0.0
        me = psutil.Process()
        for p in [me] + me.children(recursive=True):
            try:
                t = p.cpu_times()
                total += t.user + t.system + getattr(t, "children_user", 0) * 0
            except psutil.Error:
                pass
        return total

    def start(self):
        c = psutil.cpu_times()
        self.sys0 = c.user + c.system + c.nice
        self.tree0 = self._tree_cpu()
        self.t0 = time.perf_counter()

    def stop(self):
        c = psutil.cpu_times()
        busy = c.user + c.system + c.nice - self.sys0
        tree = self._tree_cpu() - self.tree0
        wall = time.perf_counter() - self.t0
        return max(busy - tree, 0.0), wall


# --------------------------------------------------------------------------------------------
# (a) grid


def grid_part(client, repeats):
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA
    from sklearn.linear_model import SGDClassifier
    from sklearn.model_selection import GridSearchCV as SkGrid
    from sklearn.model_selection import KFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from taskdml import GridSearchCV as TdGrid

    X, y = load_digits(return_X_y=True)
    pipe = make_pipeline(StandardScaler(), PCA(random_state=0), SGDClassifier(random_state=0))
    grid = {"pca__n_components": [16, 32], "sgdclassifier__alpha": list(np.logspace(-6, -1, 6))}
    cv = KFold(5)

    methods = [
        ("scikit-learn GridSearchCV n_jobs=1", lambda: SkGrid(pipe, grid, cv=cv, n_jobs=1)),
        ("scikit-learn GridSearchCV n_jobs=2 (loky)", lambda: SkGrid(pipe, grid, cv=cv, n_jobs=2)),
    ]
    try:
        from dask_ml.model_selection import GridSearchCV as DmGrid

        methods.append(
            ("dask-ml GridSearchCV (cluster)", lambda: DmGrid(pipe, grid, cv=cv, scheduler=client))
        )
    except Exception as exc:  # noqa: BLE001
        print(f"dask-ml GridSearchCV unavailable: {exc!r}")
    methods.append(("taskdml GridSearchCV (cluster)", lambda: TdGrid(pipe, grid, cv=cv)))

    rows = []
    for name, make in methods:
        times, search = [], None
        try:
            make().fit(X, y)  # warm-up, untimed
            for _ in range(repeats):
                search = make()
                t0 = time.perf_counter()
                search.fit(X, y)
                times.append(time.perf_counter() - t0)
        except Exception as exc:  # noqa: BLE001
            print(f"{name} failed: {exc!r}")
            rows.append({"method": name, "error": repr(exc)[:120]})
            continue
        rows.append(
            {
                "method": name,
                "median": statistics.median(times),
                "runs": times,
                "score": float(search.best_score_),
                "n_comp": search.best_params_["pca__n_components"],
                "alpha": float(search.best_params_["sgdclassifier__alpha"]),
            }
        )
        print(f"  {name}: {statistics.median(times):.2f}s {rows[-1]['score']:.4f}", flush=True)
    return rows


def grid_table(rows):
    out = [
        "| method | time_s (median) | runs_s | best_cv_score | best n_components | best alpha |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['method']} | failed | {r['error']} | | | |")
            continue
        out.append(
            f"| {r['method']} | {r['median']:.2f} | {' '.join(f'{t:.2f}' for t in r['runs'])} | "
            f"{r['score']:.4f} | {r['n_comp']} | {r['alpha']:.0e} |"
        )
    return "\n".join(out)


def grid_verdict(rows):
    ok = [r for r in rows if "error" not in r]
    td = next((r for r in ok if r["method"].startswith("taskdml")), None)
    peers = [r for r in ok if not r["method"].startswith("taskdml")]
    if td is None or not peers:
        return "Grid target: not measurable (a method failed)."
    fastest = min(peers, key=lambda r: r["median"])
    same = abs(td["score"] - max(r["score"] for r in peers)) < 1e-4
    met = td["median"] <= fastest["median"] and same
    ratio = td["median"] / fastest["median"]
    return (
        "Grid target (at least as fast as the fastest peer, same best score): "
        f"**{'MET' if met else 'MISSED'}** "
        f"- taskdml {td['median']:.2f}s vs fastest peer ({fastest['method']}) "
        f"{fastest['median']:.2f}s "
        f"({ratio:.2f}x its time, {'faster' if ratio <= 1 else 'slower'} by "
        f"{abs(td['median'] - fastest['median']):.2f}s); "
        f"best score {td['score']:.4f} vs peers' best {max(r['score'] for r in peers):.4f} "
        f"({'same' if same else 'different'})."
    )


# --------------------------------------------------------------------------------------------
# (b) adaptive


def _counting_sgd(count_dir):
    """An SGDClassifier recording n_samples x n_iter_ of every fit in *count_dir* (any process)."""
    from sklearn.linear_model import SGDClassifier

    class CountingSGD(SGDClassifier):
        def fit(self, X, y, **kw):
            out = super().fit(X, y, **kw)
            with open(os.path.join(count_dir, f"{os.getpid()}.txt"), "a") as f:
                f.write(f"{len(X) * self.n_iter_}\n")
            return out

    return CountingSGD


def busy_fraction(client, t0, t1, n_workers):
    stream = client.get_task_stream(start=t0 - 1)
    busy = 0.0
    for rec in stream:
        for ss in rec.get("startstops", ()):
            if ss.get("action") == "compute":
                busy += max(0.0, min(ss["stop"], t1) - max(ss["start"], t0))
    return busy / ((t1 - t0) * n_workers)


def adaptive_part(client, n_samples, n_workers, n_trials):
    import dask
    from scipy.stats import loguniform, uniform
    from sklearn.experimental import enable_halving_search_cv  # noqa: F401
    from sklearn.linear_model import SGDClassifier
    from sklearn.model_selection import HalvingRandomSearchCV, ShuffleSplit

    from taskdml import ASHASearchCV, HyperbandSearchCV
    from taskdml.datasets import make_classification, train_test_split

    n_chunks = 16
    data = make_classification(
        n_samples,
        50,
        n_informative=20,
        n_redundant=10,
        chunk_size=n_samples // n_chunks,
        random_state=0,
    )
    train, test = train_test_split(data, test_size=0.2, random_state=0)
    Xtr, ytr = train["X"].data, train["y"].data
    Xtr, ytr = client.persist([Xtr, ytr])
    from distributed import wait

    wait([Xtr, ytr])
    Xte, yte = dask.compute(test["X"].data, test["y"].data, scheduler="threads")
    Xtr_np, ytr_np = client.compute([Xtr, ytr], sync=True)
    n_train = len(ytr_np)
    n_valid_chunks = min(n_chunks - 1, max(1, round(0.2 * n_chunks)))
    rows_per_epoch = (
        n_train * (n_chunks - n_valid_chunks) / n_chunks
    )  # approx.: chunks differ a little

    space = {
        "alpha": loguniform(1e-7, 1e-2),
        "penalty": ["l2", "l1", "elasticnet"],
        "l1_ratio": uniform(0, 1),
    }
    results = []
    loads = {}

    # scikit-learn HalvingRandomSearchCV
    count_dir = tempfile.mkdtemp(prefix="search-bench-")
    CountingSGD = _counting_sgd(count_dir)
    min_res = n_train // 81
    halving = HalvingRandomSearchCV(
        CountingSGD(loss="log_loss", random_state=0),
        space,
        n_candidates="exhaust",
        factor=3,
        resource="n_samples",
        min_resources=min_res,
        cv=ShuffleSplit(1, test_size=0.2, random_state=0),
        n_jobs=2,
        random_state=0,
    )
    load = Load()
    load.start()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        halving.fit(Xtr_np, ytr_np)
        wall = time.perf_counter() - t0
    loads["halving"] = load.stop()
    counts = []
    for count_file in os.listdir(count_dir):
        with open(os.path.join(count_dir, count_file)) as lines:
            counts += [int(line) for line in lines]
    refit_samples = n_train * halving.best_estimator_.n_iter_
    results.append(
        {
            "method": "scikit-learn HalvingRandomSearchCV "
            f"(n_jobs=2, {len(halving.cv_results_['params'])} fits, min_resources={min_res})",
            "wall": wall,
            "acc": halving.best_estimator_.score(Xte, yte),
            "val": halving.best_score_,
            "params": halving.best_params_,
            "samples": sum(counts) - refit_samples,
            "refit": refit_samples,
            "busy": None,
            "n_trials": int(halving.n_candidates_[0]),
        }
    )
    print(f"  halving: {wall:.1f}s acc {results[-1]['acc']:.4f}", flush=True)

    client.get_task_stream(start=time.time())  # make sure the scheduler records the stream
    est = SGDClassifier(loss="log_loss", random_state=0)
    searches = [
        (
            "taskdml HyperbandSearchCV (max_iter=27, sync)",
            lambda: HyperbandSearchCV(
                est,
                space,
                max_iter=27,
                aggressiveness=3,
                parallel={"strategy": "sync"},
                random_state=0,
            ),
        ),
        (
            f"taskdml ASHASearchCV (n_trials={n_trials}, max_epochs=27, sync)",
            lambda: ASHASearchCV(
                est,
                space,
                n_trials=n_trials,
                max_epochs=27,
                min_epochs=1,
                reduction_factor=3,
                parallel={"strategy": "sync"},
                random_state=0,
            ),
        ),
    ]
    for name, make in searches:
        search = make()
        load = Load()
        load.start()
        t0w = time.time()
        t0 = time.perf_counter()
        try:
            search.fit(Xtr, ytr, classes=[0, 1])
        except Exception as exc:  # noqa: BLE001
            print(f"{name} failed: {exc!r}")
            results.append({"method": name, "error": repr(exc)[:160]})
            loads[name] = load.stop()
            continue
        wall = time.perf_counter() - t0
        t1w = time.time()
        loads[name] = load.stop()
        time.sleep(0.5)
        busy = busy_fraction(client, t0w, t1w, n_workers)
        epochs = float(search.trials_["budget"].sum())
        best_budget = search.trials_.loc[
            search.trials_["params"].apply(lambda p, best=search.best_params_: p == best), "budget"
        ]
        best_budget = float(best_budget.max()) if len(best_budget) else 27.0
        results.append(
            {
                "method": name,
                "wall": wall,
                "acc": search.best_estimator_.score(Xte, yte),
                "val": search.best_score_,
                "params": search.best_params_,
                "samples": epochs * rows_per_epoch,
                "refit": best_budget * n_train,
                "busy": busy,
                "n_trials": int(search.n_trials_),
                "meta": getattr(search, "metadata_", None),
            }
        )
        print(f"  {name}: {wall:.1f}s acc {results[-1]['acc']:.4f} busy {busy:.0%}", flush=True)
    return (
        results,
        loads,
        {"n_train": n_train, "n_test": len(yte), "rows_per_epoch": rows_per_epoch},
    )


def _fmt_params(p):
    return ", ".join(
        f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(p.items())
    )


def adaptive_table(results):
    out = [
        "| method | wall_s | trials | best holdout acc | best val score "
        "| samples processed (search) | + refit | worker busy | best params |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            out.append(f"| {r['method']} | failed | | | | | | | {r['error']} |")
            continue
        busy = "n/a (loky)" if r["busy"] is None else f"{r['busy']:.0%}"
        out.append(
            f"| {r['method']} | {r['wall']:.1f} | {r['n_trials']} | {r['acc']:.4f} "
            f"| {r['val']:.4f} | {r['samples'] / 1e6:.1f} M | {r['refit'] / 1e6:.1f} M | {busy} "
            f"| {_fmt_params(r['params'])} |"
        )
    return "\n".join(out)


def adaptive_verdict(results):
    ok = [r for r in results if "error" not in r]
    asha = next((r for r in ok if "ASHA" in r["method"]), None)
    halving = next((r for r in ok if "Halving" in r["method"]), None)
    if asha is None or halving is None:
        return "ASHA target: not measurable (a method failed)."
    best = max(r["acc"] for r in ok)
    gap = (best - asha["acc"]) * 100
    time_ratio = asha["wall"] / halving["wall"]
    c1, c2, c3 = gap <= 0.5, time_ratio <= 0.5, asha["busy"] > 0.85
    lines = [
        f"ASHA target: **{'MET' if c1 and c2 and c3 else 'MISSED'}**",
        f"- accuracy within 0.5 pp of the best of any method ({best:.4f}): "
        f"{'met' if c1 else 'MISSED'} "
        f"- ASHA {asha['acc']:.4f}, {gap:.2f} pp below",
        f"- at most half of HalvingRandomSearchCV's wall time ({halving['wall']:.1f}s, "
        f"limit {halving['wall'] / 2:.1f}s): "
        f"{'met' if c2 else 'MISSED'} - ASHA {asha['wall']:.1f}s = {time_ratio:.2f}x",
        f"- workers > 85 % busy: {'met' if c3 else 'MISSED'} - {asha['busy']:.0%}",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------


def machine():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = psutil.virtual_memory().total / 2**30
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {mem:.0f} GiB RAM, "
        f"{platform.system()} {platform.release()}"
    )


def versions():
    import dask
    import distributed
    import numpy
    import sklearn

    import taskdml

    v = {
        "python": platform.python_version(),
        "taskdml": getattr(taskdml, "__version__", "?"),
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "scikit-learn": sklearn.__version__,
        "numpy": numpy.__version__,
    }
    try:
        import dask_ml

        v["dask-ml"] = dask_ml.__version__
    except Exception:  # noqa: BLE001
        v["dask-ml"] = "not installed"
    try:
        v["commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=os.path.dirname(RESULTS),
        ).stdout.strip()
    except OSError:
        pass
    return ", ".join(f"{k} {x}" for k, x in v.items())


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n-samples", type=int, default=400_000)
    ap.add_argument("--n-trials", type=int, default=40, help="ASHA trials")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip-grid", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--note", default="")
    args = ap.parse_args()

    from distributed import Client, LocalCluster

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    with (
        LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        t_all = time.perf_counter()
        load = Load()
        load.start()
        grid_rows = [] if args.skip_grid else grid_part(client, args.repeats)
        grid_load = load.stop()
        adaptive, loads, info = adaptive_part(client, args.n_samples, args.workers, args.n_trials)
        total = time.perf_counter() - t_all

    cmd = "python benchmarks/search.py " + " ".join(sys.argv[1:])
    other = sum(v[0] for v in loads.values()) + grid_load[0]
    timed = sum(v[1] for v in loads.values()) + grid_load[1]
    load_line = (
        f"Load from other processes during the timed parts: {other:.0f} CPU-s over {timed:.0f} s "
        f"(= {other / timed:.2f} of a CPU on average; load average before the run "
        f"{load_before[0]:.2f}). "
        + (
            "**The machine was busy: timings are inflated/noisy.**"
            if other / timed > 0.2
            else "The machine was calm."
        )
    )
    per = "; ".join(
        f"{k.split(' (')[0]}: {v[0] / max(v[1], 1e-9):.2f} CPU" for k, v in loads.items()
    )
    report = [
        "## Hyperparameter search (`benchmarks/search.py`)",
        "",
        f"- command: `{cmd.strip()}`",
        f"- date: {started:%Y-%m-%d %H:%M} UTC; total benchmark time {total:.0f} s",
        f"- machine: {machine()}",
        f"- versions: {versions()}",
        f"- cluster: LocalCluster, {args.workers} worker processes x 1 thread, 127.0.0.1",
        f"- {load_line} Per search: {per}.",
    ]
    if args.note:
        report.append(f"- note: {args.note}")
    if grid_rows:
        report += [
            "",
            "### (a) Grid search, digits (1797 x 64), 12 candidates x KFold(5); "
            f"one untimed warm-up, median of {args.repeats}",
            "",
            grid_table(grid_rows),
            "",
            grid_verdict(grid_rows),
        ]
    report += [
        "",
        f"### (b) Adaptive search, synthetic {args.n_samples:,} x 50 (16 chunks), "
        f"train {info['n_train']:,} / holdout {info['n_test']:,}; one run each",
        "",
        "Samples processed = sum over trials of epochs x training rows (taskdml: budget x "
        f"~{info['rows_per_epoch']:,.0f} rows of the 13 non-validation chunks; scikit-learn: "
        "n_resources x n_iter_ of every fit, counted inside the estimator), not counting the "
        "refit, which is shown separately. "
        "Worker busy = task-stream compute time / (wall x workers).",
        "",
        adaptive_table(adaptive),
        "",
        adaptive_verdict(adaptive),
    ]
    text = "\n".join(report) + "\n"
    print("\n" + text)
    if not args.no_write:
        if os.path.exists(RESULTS):
            with open(RESULTS) as f:
                existing = f.read()
        else:
            existing = "# taskdml benchmark results\n"
        with open(RESULTS, "w") as f:
            f.write(existing.rstrip("\n") + "\n\n" + text)
        print(f"appended to {RESULTS}")


if __name__ == "__main__":
    main()
