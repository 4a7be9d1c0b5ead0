"""The peers' side of the graph benchmark: PageRank and connected components on R-MAT graphs,
timed for one scipy thread, networkit, scikit-network and networkx.

The graph is ``taskdml.datasets.make_rmat(scale, 16, random_state=0)`` (Graph500's a, b, c and
edge factor, vertex ids permuted), with ``scale = round(log2(edges / 16))`` for each ``--edges``
asked for, computed in this process and made **simple** (self loops dropped, duplicate edges
kept once), because networkx and networkit hold simple graphs; every peer gets that same
directed graph. What is timed, per peer:

- ``pagerank-20``: 20 power iterations (damping 0.85, dangling vertices' rank spread uniformly,
  networkx's definition); ``pagerank-tol``: iterations until the L1 change is below 1e-10
  (networkit: ``norm=L1_NORM``; networkx: ``tol=1e-10 / n``, as it multiplies by n);
  ``components``: weakly connected components.
- ``scipy-1thread``: the power iteration written below on a CSR matrix (``M = A^T D^-1``),
  under ``threadpoolctl.threadpool_limits(1)`` (McSherry's COST baseline: one good thread);
  ``scipy.sparse.csgraph.connected_components``.
- ``networkit``: ``nk.centrality.PageRank`` with sinks distributed, on every core;
  ``WeaklyConnectedComponents``.
- ``scikit-network``: ``sknetwork.ranking.PageRank`` (power iteration);
  ``sknetwork.topology.get_connected_components``. Its PageRank is not networkx's on a graph
  with dangling vertices (0.33: ``RandomSurferOperator`` adds the restart term ``(1 - d *
  has_out[i]) * seeds[i] * sum(x)`` by *target* ``i``, where the dangling mass should be
  spread from the dangling sources), so its L1 distance to scipy is large on R-MAT: timed,
  not a reference.
- ``networkx``: ``nx.pagerank`` and ``nx.number_weakly_connected_components``, only up to
  ``--networkx-max-edges`` (default 10^6).

Each measurement runs in a forked child with a wall-clock cap (``--cap``, seconds): past it the
child is killed and the row says ``capped``. Building each peer's graph object from the edge
arrays is timed apart (``load``). Every PageRank is compared with the one-thread scipy result to
``tol`` (L1), and every component count with csgraph's, so a fast wrong answer shows.

    python benchmarks/graph_peers.py --edges 1e6 1e7 --json graph_peers.json

Prints a markdown table and writes the rows as JSON. The taskdml side is added by
``benchmarks/graph.py``.
"""

import argparse
import json
import math
import multiprocessing
import os
import platform
import resource
import time
import traceback

import numpy as np
import scipy.sparse
from scipy.sparse import csgraph

DAMPING = 0.85
TOL = 1e-10
MAX_ITER = 1000
PEERS = ("scipy-1thread", "networkit", "scikit-network", "networkx")
TASKS = ("pagerank-20", "pagerank-tol", "components")


# --------------------------------------------------------------------------------------------
# The graph


def rmat_graph(edges, seed=0):
    """The simple directed R-MAT graph nearest *edges* edges: ``(n, src, dst, generated)``."""
    from taskdml.datasets import make_rmat

    scale = max(1, round(math.log2(edges / 16)))
    graph = make_rmat(scale, 16, random_state=seed, chunk_edges=1 << 22)
    src, dst = (graph[name].data.compute(scheduler="threads") for name in ("src", "dst"))
    n = 1 << scale
    keep = src != dst
    pairs = np.unique(src[keep] * n + dst[keep])
    return n, pairs // n, pairs % n, len(src)


# --------------------------------------------------------------------------------------------
# One scipy thread


def transition(n, src, dst):
    """``M = A^T D^-1`` as CSR, and the mask of dangling vertices (no out-edge)."""
    out_degree = np.bincount(src, minlength=n).astype(np.float64)
    weight = 1.0 / out_degree[src]
    M = scipy.sparse.csr_matrix((weight, (dst, src)), shape=(n, n))
    return M, out_degree == 0


def scipy_pagerank(M, dangling, max_iter, tol):
    """Power iteration: ``x <- d (M x + sum(x[dangling]) / n) + (1 - d) / n`` until the L1
    change is below *tol* or *max_iter* iterations; returns ``(x, iterations)``."""
    n = M.shape[0]
    x = np.full(n, 1.0 / n)
    iterations = 0
    while iterations < max_iter:
        new = DAMPING * (M @ x + x[dangling].sum() / n) + (1 - DAMPING) / n
        change = np.abs(new - x).sum()
        x, iterations = new, iterations + 1
        if change < tol:
            break
    return x, iterations


def run_scipy(task, n, src, dst):
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        began = time.perf_counter()
        M, dangling = transition(n, src, dst)
        A = scipy.sparse.csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
        load = time.perf_counter() - began
        began = time.perf_counter()
        if task == "components":
            count, _ = csgraph.connected_components(A, directed=True, connection="weak")
            return load, time.perf_counter() - began, {"components": int(count)}
        max_iter, tol = (20, 0.0) if task == "pagerank-20" else (MAX_ITER, TOL)
        x, iterations = scipy_pagerank(M, dangling, max_iter, tol)
        return load, time.perf_counter() - began, {"iterations": iterations, "rank": x}


# --------------------------------------------------------------------------------------------
# The peers


def run_networkit(task, n, src, dst):
    import networkit as nk

    nk.setNumberOfThreads(os.cpu_count())
    began = time.perf_counter()
    G = nk.graph.Graph(n, directed=True)
    G.addEdges((src.astype(np.uint64), dst.astype(np.uint64)))
    load = time.perf_counter() - began
    began = time.perf_counter()
    if task == "components":
        cc = nk.components.WeaklyConnectedComponents(G)
        cc.run()
        return load, time.perf_counter() - began, {"components": cc.numberOfComponents()}
    tol = 0.0 if task == "pagerank-20" else TOL
    pr = nk.centrality.PageRank(
        G, damp=DAMPING, tol=tol, distributeSinks=nk.centrality.SinkHandling.DistributeSinks
    )
    pr.maxIterations = 20 if task == "pagerank-20" else MAX_ITER
    pr.norm = nk.centrality.Norm.L1_NORM
    pr.run()
    rank = np.asarray(pr.scores())
    return (
        load,
        time.perf_counter() - began,
        {"iterations": pr.numberOfIterations(), "rank": rank / rank.sum()},
    )


def run_sknetwork(task, n, src, dst):
    from sknetwork.ranking import PageRank
    from sknetwork.topology import get_connected_components

    began = time.perf_counter()
    A = scipy.sparse.csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
    load = time.perf_counter() - began
    began = time.perf_counter()
    if task == "components":
        labels = get_connected_components(A, connection="weak")
        return load, time.perf_counter() - began, {"components": len(np.unique(labels))}
    n_iter, tol = (20, 0.0) if task == "pagerank-20" else (MAX_ITER, TOL)
    rank = PageRank(damping_factor=DAMPING, solver="piteration", n_iter=n_iter, tol=tol)
    scores = rank.fit_predict(A)
    return load, time.perf_counter() - began, {"rank": scores / scores.sum()}


def run_networkx(task, n, src, dst):
    import networkx as nx

    began = time.perf_counter()
    G = nx.DiGraph()
    G.add_nodes_from(range(n))
    G.add_edges_from(zip(src.tolist(), dst.tolist()))
    load = time.perf_counter() - began
    began = time.perf_counter()
    if task == "components":
        count = nx.number_weakly_connected_components(G)
        return load, time.perf_counter() - began, {"components": count}
    if task == "pagerank-20":
        try:  # 20 iterations: a tolerance never met, and the error networkx raises for it
            nx.pagerank(G, alpha=DAMPING, max_iter=20, tol=0.0)
        except nx.PowerIterationFailedConvergence:
            pass
        return load, time.perf_counter() - began, {}
    rank = nx.pagerank(G, alpha=DAMPING, max_iter=MAX_ITER, tol=TOL / n)
    values = np.array([rank[v] for v in range(n)])
    return load, time.perf_counter() - began, {"rank": values}


RUNNERS = {
    "scipy-1thread": run_scipy,
    "networkit": run_networkit,
    "scikit-network": run_sknetwork,
    "networkx": run_networkx,
}


# --------------------------------------------------------------------------------------------
# Bounded runs


def _child(queue, peer, task, n, src, dst):
    try:
        load, seconds, result = RUNNERS[peer](task, n, src, dst)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
        queue.put(("ok", load, seconds, result, peak))
    except Exception:  # reported in the row, the other measurements go on
        queue.put(("error", traceback.format_exc(limit=3)))


def measure(peer, task, n, src, dst, cap):
    """Run one measurement in a forked child, killed after *cap* seconds."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(queue, peer, task, n, src, dst))
    child.start()
    try:
        outcome = queue.get(timeout=cap)
    except Exception:  # queue.Empty: past the cap
        outcome = ("capped",)
    child.join(timeout=5)
    if child.is_alive():
        child.kill()
        child.join()
    return outcome


def run(edges_list, cap, networkx_max_edges, peers):
    rows = []
    for edges in edges_list:
        began = time.perf_counter()
        n, src, dst, generated = rmat_graph(int(edges))
        print(
            f"# R-MAT scale {int(math.log2(n))}: {n:,} vertices, {generated:,} edges generated, "
            f"{len(src):,} simple edges ({time.perf_counter() - began:.1f} s to make)",
            flush=True,
        )
        reference = {}
        for task in TASKS:
            for peer in peers:
                row = {"edges": len(src), "vertices": n, "peer": peer, "task": task}
                if peer == "networkx" and len(src) > networkx_max_edges:
                    rows.append({**row, "status": f"skipped (> {networkx_max_edges:g} edges)"})
                    continue
                outcome = measure(peer, task, n, src, dst, cap)
                if outcome[0] != "ok":
                    status = "capped" if outcome[0] == "capped" else "error"
                    rows.append({**row, "status": status, "detail": outcome[1:]})
                    print(f"{peer} {task}: {status} {outcome[1:]}", flush=True)
                    continue
                _, load, seconds, result, peak = outcome
                row.update(status="ok", load_s=load, seconds=seconds, peak_rss_gib=peak)
                if "iterations" in result:
                    row["iterations"] = int(result["iterations"])
                if task == "pagerank-20":
                    row["iterations_per_s"] = 20 / seconds
                if "components" in result:
                    reference.setdefault(task, result["components"])
                    row["components"] = result["components"]
                    row["agrees"] = result["components"] == reference[task]
                if "rank" in result and task == "pagerank-tol":
                    reference.setdefault(task, result["rank"])
                    row["l1_to_scipy"] = float(np.abs(result["rank"] - reference[task]).sum())
                rows.append(row)
                print(f"{peer} {task}: {seconds:.3f} s (load {load:.2f} s)", flush=True)
    return rows


def table(rows):
    lines = [
        "| edges | task | peer | seconds | iterations/s | iterations | load s | "
        "L1 to scipy / components | peak RSS GiB |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for row in rows:
        if row["status"] != "ok":
            lines.append(
                f"| {row['edges']:,} | {row['task']} | {row['peer']} | {row['status']} | | | | | |"
            )
            continue
        check = ""
        if "l1_to_scipy" in row:
            check = f"{row['l1_to_scipy']:.1e}"
        elif "components" in row:
            check = f"{row['components']:,}" + ("" if row["agrees"] else " (differs)")
        lines.append(
            f"| {row['edges']:,} | {row['task']} | {row['peer']} | {row['seconds']:.3f} "
            f"| {row.get('iterations_per_s', float('nan')):.1f} | {row.get('iterations', '')} "
            f"| {row['load_s']:.2f} | {check} | {row['peak_rss_gib']:.2f} |"
        )
    return "\n".join(lines).replace("| nan |", "| |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", nargs="+", type=float, default=[1e6, 1e7])
    parser.add_argument("--cap", type=float, default=600.0, help="seconds per measurement")
    parser.add_argument("--networkx-max-edges", type=float, default=1e6)
    parser.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS))
    parser.add_argument("--json", default="graph_peers.json", help="where to write the rows")
    args = parser.parse_args(argv)
    rows = run(args.edges, args.cap, args.networkx_max_edges, args.peers)
    print()
    print(table(rows))
    record = {
        "command": "python benchmarks/graph_peers.py "
        + " ".join(f"--edges {e:g}" for e in args.edges),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "rows": rows,
    }
    with open(args.json, "w") as out:
        json.dump(record, out, indent=1, default=str)
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
