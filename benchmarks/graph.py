"""The graph benchmark: taskdml's PageRank and connected components on 2 workers against one
scipy thread (McSherry's COST), networkit, scikit-network and networkx (issue 26).

Two graphs per ``--edges`` value, each made once in this process and handed to every side:

- **R-MAT**: the simple directed graph of ``graph_peers.rmat_graph`` (Graph500's parameters,
  self loops dropped, duplicates kept once) at the smallest scale whose ``16 * 2**scale``
  generated edges reach ``--edges``;
- **SBM**: ``make_sbm`` with 10 communities of ``edges / 20`` vertices (mean degree 20 in
  and out) and 80 % of the edges inside communities, undirected: ``--edges`` undirected
  edges, twice as many directed arcs, which is the graph the peers get (each edge both
  ways) and what taskdml's partitions hold.

The peers are timed by ``graph_peers.measure`` (a forked child each, capped at ``--cap``
seconds), before the cluster starts. Then taskdml runs on a fresh ``LocalCluster`` of
``--workers`` worker processes of one thread each: the edges are persisted on the workers
first (made there for the SBM, sent from here for the R-MAT graph), then timed:

- ``partition``: ``partition_graph`` until every partition is on its worker (directed for
  PageRank; undirected for components, once more for R-MAT, the same one for the SBM);
- ``pagerank-20``: 20 supersteps (``tol=0``); ``pagerank-tol``: until the L1 change is below
  1e-10, as ``scipy_pagerank`` stops; ``components``: min-label propagation until no label
  changes; with ``--staleness 2``, both again with ``staleness=2`` (rows ``taskdml
  staleness=2``: bounded-staleness supersteps). Seconds are the call's wall time (submit
  to the history back, the values left on the workers); ``per superstep`` is the median
  of the history's ``seconds`` and ``exchange`` the median of its ``exchange_s`` (rank 0
  waiting for mirrors and in the all-reduce).

Checks: taskdml's PageRank against the one-thread scipy result (L1; the issue's bar is 1e-10),
its iteration count against scipy's, its component count against ``csgraph``'s. Memory: each
worker's peak resident memory (``VmHWM``, reset per graph through ``/proc/self/clear_refs``).
Ratios are to one scipy thread: taskdml's seconds over scipy's (below 1: taskdml is faster, so
its COST is at most ``--workers`` cores).

    python benchmarks/graph.py --edges 1e6         # about 1.5 minutes on 2 cores
    python benchmarks/graph.py --edges 1e7         # about 6 minutes; both update RESULTS.md

**Out of core** (``--out-of-core``, its own block of RESULTS.md): a weighted directed R-MAT
graph of ``--scale`` and ``--edge-factor`` written chunk by chunk to a Zarr store
(``--store``; kept, and reused when it exists) is partitioned from the store by workers whose
``--memory-limit`` is a fraction of its size (``partition_graph`` chooses out of core by
itself: the run checks that it did), and PageRank runs 20 supersteps streamed from the
workers' disks. Rows: the graph's bytes (its edge list in memory, 24 bytes an edge, and the
in-memory CSR it would be, 12 bytes an in-edge: int32 columns, float64 weights, duplicates
summed), the workers' total limit, each worker's peak resident memory (``VmHWM``, reset
once the cluster is warm) against its limit, the partition seconds, the superstep. Then,
at ``--compare-edge-factor`` on workers without a limit, in memory against out of core: per
superstep, both to tol 1e-10, their L1 to each other and to a scipy power iteration here.

    python benchmarks/graph.py --out-of-core --scale 20 --edge-factor 256 --memory-limit 640

(about 12 minutes on 2 shared cores, most of it partitioning: each partition reads the
store twice.)

Prints a markdown table and rewrites its block of ``RESULTS.md`` (``--no-write``: prints
only). The machine's load average goes with the figures: on a shared machine they are noisy.
"""

import argparse
import math
import os
import statistics
import sys
import time

import _results
import graph_peers
import numpy as np

PACKAGES = ("taskdml", "dask", "distributed", "numpy", "scipy", "networkit", "scikit-network")
TITLE = "Graph parallelism: PageRank and components against one scipy thread (issue 26)"
CHUNK_EDGES = 1 << 22


# --------------------------------------------------------------------------------------------
# The graphs


def rmat(edges):
    """The simple directed R-MAT graph of at least *edges* generated edges."""
    scale = max(1, math.ceil(math.log2(edges / 16) - 1e-9))
    n, src, dst, _ = graph_peers.rmat_graph(16 << scale)
    return {"name": f"R-MAT scale {scale}", "n": n, "src": src, "dst": dst, "directed": True}


def sbm(edges, seed=0):
    """An undirected SBM of about *edges* edges; its arcs (both ways) for the peers."""
    from taskdml.datasets import make_sbm

    k, size = 10, max(2, int(edges) // 20)
    n = k * size
    p_in = 0.8 * edges / (k * size * (size - 1) / 2)
    p_out = 0.2 * edges / (k * (k - 1) / 2 * size * size)
    graph = make_sbm([size] * k, p_in, p_out, chunk_edges=CHUNK_EDGES, random_state=seed)
    src, dst = (graph[v].data.compute(scheduler="threads") for v in ("src", "dst"))
    return {
        "name": f"SBM {k} x {size:,}",
        "n": n,
        "src": np.concatenate([src, dst]),
        "dst": np.concatenate([dst, src]),
        "directed": False,
        "make": (make_sbm, ([size] * k, p_in, p_out), {"random_state": seed}),
    }


# --------------------------------------------------------------------------------------------
# taskdml's side


def _clear_peak():
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # resets VmHWM to the current resident size


def _peak_gib():
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 2**20


def edges_on_workers(client, graph):
    """The graph's edges Dataset, persisted on the workers."""
    import dask.array as da
    import xarray as xr

    if "make" in graph:  # made where it lives
        make, args, kwargs = graph["make"]
        edges = make(*args, chunk_edges=CHUNK_EDGES, **kwargs)
        edges = edges[["src", "dst"]]
    else:  # sent from here, a chunk per future
        import dask

        n, total = graph["n"], len(graph["src"])
        starts = range(0, total, CHUNK_EDGES)
        columns = {}
        for v in ("src", "dst"):
            parts = client.scatter([graph[v][i : i + CHUNK_EDGES] for i in starts])
            columns[v] = da.concatenate(
                [
                    da.from_delayed(dask.delayed(part), (min(CHUNK_EDGES, total - i),), np.int64)
                    for part, i in zip(parts, starts)
                ]
            )
        edges = xr.Dataset(
            {v: ("edge", c) for v, c in columns.items()}, attrs={"shape": [n, n], "directed": True}
        )
    edges = client.persist(edges)
    from distributed import wait

    wait([edges.src.data, edges.dst.data])
    return edges


def warm_up(client):
    """The workers' first graph work (imports, connections) done before anything is timed."""
    import networkx as nx

    from taskdml.graph import connected_components, pagerank

    small = nx.gnm_random_graph(200, 800, seed=0, directed=True)
    pagerank(small, max_iter=5, client=client)
    connected_components(small, client=client)


def run_taskdml(client, graph, reference, staleness=()):
    """taskdml's rows for one graph (*reference*: the scipy rows by task; *staleness*: the
    bounds ``s`` to run ``pagerank-tol`` and ``components`` again with)."""
    from distributed import wait

    from taskdml.graph import connected_components, pagerank, partition_graph

    client.run(_clear_peak)
    edges = edges_on_workers(client, graph)
    rows = []

    def timed_partition(directed):
        began = time.perf_counter()
        partitioned = partition_graph(edges, directed=directed, client=client)
        wait(partitioned.partitions)
        return partitioned, time.perf_counter() - began

    directed, partition_s = timed_partition(None)
    stats = directed.stats()
    undirected, undirected_s = (directed, 0.0) if not graph["directed"] else timed_partition(False)
    runs = [(task, 0) for task in graph_peers.TASKS]
    runs += [(task, s) for s in staleness for task in ("pagerank-tol", "components")]
    for task, s in runs:
        began = time.perf_counter()
        if task == "components":
            out = connected_components(undirected, client=client, staleness=s)
        else:
            max_iter, tol = (20, 0.0) if task == "pagerank-20" else (graph_peers.MAX_ITER, 1e-10)
            out = pagerank(directed, tol=tol, max_iter=max_iter, client=client, staleness=s)
        seconds = time.perf_counter() - began
        history = out.attrs["history"]
        row = {
            "peer": "taskdml" + (f" staleness={s}" if s else ""),
            "task": task,
            "status": "ok",
            "seconds": seconds,
            "iterations": out.attrs["n_iter"],
            "iterations_per_s": out.attrs["n_iter"] / seconds,
            "superstep_s": statistics.median(h["seconds"] for h in history),
            "exchange_s": statistics.median(h["exchange_s"] for h in history),
            "partition_s": undirected_s if task == "components" else partition_s,
        }
        if task == "pagerank-tol":
            rank = client.compute(out.pagerank.data).result()
            row["l1_to_scipy"] = float(np.abs(rank - reference[task]["rank"]).sum())
        if task == "components":
            row["components"] = out.attrs["n_components"]
            row["agrees"] = row["components"] == reference[task]["components"]
        rows.append(row)
        print(f"{row['peer']} {task}: {seconds:.3f} s, {row['iterations']} supersteps", flush=True)
    peaks = client.run(_peak_gib)
    for row in rows:
        row["peak_rss_gib"] = max(peaks.values())
        row["worker_peaks_gib"] = sorted(peaks.values())
    rows[0]["stats"] = stats
    return rows


# --------------------------------------------------------------------------------------------
# Out of core


def rmat_store(path, scale, edge_factor):
    """The weighted directed R-MAT graph's edge list in a Zarr store at *path* (written
    chunk by chunk by this process's threads, or kept from an earlier run)."""
    from taskdml.datasets import make_rmat, write_zarr

    if not os.path.exists(path):
        began = time.perf_counter()
        edges = make_rmat(scale, edge_factor, weighted=True, chunk_edges=1 << 19, random_state=0)
        write_zarr(edges, path)
        print(f"# wrote {path} in {time.perf_counter() - began:.0f} s", flush=True)
    return path


def _du(path):
    return sum(
        os.path.getsize(os.path.join(where, name))
        for where, _, names in os.walk(path)
        for name in names
    )


def pagerank_rows(client, edges, label, out_of_core, tol, max_iter, block_edges=None):
    """Partition *edges* (out of core or not, ``None``: as ``partition_graph`` chooses) and
    run PageRank; a row and the ranks' future."""
    from distributed import wait

    from taskdml.graph import pagerank, partition_graph

    began = time.perf_counter()
    graph = partition_graph(edges, out_of_core=out_of_core, block_edges=block_edges, client=client)
    wait(graph.partitions)
    partition_s = time.perf_counter() - began
    stats = graph.stats()
    began = time.perf_counter()
    out = pagerank(graph, tol=tol, max_iter=max_iter, client=client)
    seconds = time.perf_counter() - began
    history = out.attrs["history"]
    row = {
        "run": label,
        "out_of_core": [s["out_of_core"] for s in stats],
        "in_edges": sum(s["in_edges"] for s in stats),
        "edge_bytes": [s["edge_bytes"] for s in stats],
        "partition_s": partition_s,
        "seconds": seconds,
        "iterations": out.attrs["n_iter"],
        "superstep_s": statistics.median(h["seconds"] for h in history),
    }
    print(f"{label}: {row}", flush=True)
    return row, out.pagerank.data


def run_out_of_core(args):
    """The out-of-core rows (see the module docstring)."""
    import dask.array as da
    import scipy.sparse
    from distributed import Client, LocalCluster

    from taskdml.datasets import read_edges

    limit = int(args.memory_limit * 2**20)
    path = rmat_store(args.store, args.scale, args.edge_factor)
    edges = read_edges(path)
    n_edges = edges.sizes["edge"]
    rows = []
    with (
        LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            host="127.0.0.1",
            memory_limit=limit,
        ) as cluster,
        Client(cluster) as client,
    ):
        warm_up(client)
        client.run(_clear_peak)
        baseline = client.run(_peak_gib)
        row, _ = pagerank_rows(
            client, edges, "out of core, limited", None, 0.0, 20, args.block_edges
        )
        peaks = client.run(_peak_gib)
        row.update(
            edges=n_edges,
            list_gib=n_edges * 24 / 2**30,
            csr_gib=row["in_edges"] * 12 / 2**30,
            store_gib=_du(path) / 2**30,
            limit_gib=limit / 2**30,
            workers=args.workers,
            baseline_gib=sorted(baseline.values()),
            peaks_gib=sorted(peaks.values()),
        )
        rows.append(row)
        if not all(row["out_of_core"]):
            raise SystemExit(f"partition_graph kept the partitions in memory: {row}")
    compare = rmat_store(
        args.store + f".ef{args.compare_edge_factor}", args.scale, args.compare_edge_factor
    )
    edges = read_edges(compare)
    src, dst, weight = (edges[v].data.compute() for v in ("src", "dst", "weight"))
    n = edges.attrs["shape"][0]
    out_weight = np.bincount(src, weight, minlength=n)
    M = scipy.sparse.csr_matrix((weight / out_weight[src], (dst, src)), shape=(n, n))
    reference, _ = graph_peers.scipy_pagerank(M, out_weight == 0, 1000, 1e-10)
    del src, dst, weight, M
    with (
        LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=True,
            dashboard_address=None, host="127.0.0.1",
        ) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        warm_up(client)
        ranks = {}
        for label, out_of_core in (("in memory", False), ("out of core", True)):
            row, rank = pagerank_rows(
                client, edges, label, out_of_core, 1e-10, 1000, args.block_edges
            )
            ranks[label] = client.compute(da.asarray(rank)).result()
            row.update(
                edges=edges.sizes["edge"],
                l1_to_scipy=float(np.abs(ranks[label] - reference).sum()),
            )
            rows.append(row)
        rows[-1]["l1_to_in_memory"] = float(np.abs(ranks["out of core"] - ranks["in memory"]).sum())
    return rows


def out_of_core_table(rows):
    big, *compare = rows
    gib = " / ".join
    lines = [
        "| edges | edge list GiB (24 B/edge) | in-memory CSR GiB (12 B/in-edge) | Zarr store GiB "
        "| workers × limit GiB | graph / total limit | worker baseline GiB | worker peak GiB "
        "| partition s | superstep ms | streamed block MiB |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {big['edges']:,} | {big['list_gib']:.2f} | {big['csr_gib']:.2f} "
        f"| {big['store_gib']:.2f} | {big['workers']} × {big['limit_gib']:.2f} "
        f"| {big['list_gib'] / (big['workers'] * big['limit_gib']):.1f}× "
        f"| {gib(f'{p:.2f}' for p in big['baseline_gib'])} "
        f"| {gib(f'{p:.2f}' for p in big['peaks_gib'])} | {big['partition_s']:.1f} "
        f"| {1e3 * big['superstep_s']:.0f} "
        f"| {gib(f'{b / 2**20:.1f}' for b in big['edge_bytes'])} |",
        "",
        "| same machine, no limit | edges | partition s | supersteps | superstep ms | L1 to scipy "
        "| L1 to in memory |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in compare:
        to_memory = f"{row['l1_to_in_memory']:.1e}" if "l1_to_in_memory" in row else ""
        lines.append(
            f"| {row['run']} | {row['edges']:,} | {row['partition_s']:.1f} | {row['iterations']} "
            f"| {1e3 * row['superstep_s']:.0f} | {row['l1_to_scipy']:.1e} | {to_memory} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The run


def run(edges_list, workers, cap, networkx_max_edges, peers, staleness=()):
    from distributed import Client, LocalCluster

    graphs = []
    for edges in edges_list:
        for make in (rmat, sbm):
            began = time.perf_counter()
            graph = make(edges)
            graph["edges"], graph["asked"] = len(graph["src"]), edges
            print(
                f"# {graph['name']}: {graph['n']:,} vertices, {graph['edges']:,} arcs "
                f"({time.perf_counter() - began:.1f} s to make)",
                flush=True,
            )
            graphs.append(graph)
    rows, references = [], []
    for graph in graphs:  # the peers first, in forked children, before any cluster exists
        n, src, dst = graph["n"], graph["src"], graph["dst"]
        reference = {}
        for task in graph_peers.TASKS:
            for peer in peers:
                row = {"graph": graph["name"], "edges": graph["edges"], "peer": peer}
                row["task"] = task
                if peer == "networkx" and graph["edges"] > networkx_max_edges:
                    rows.append({**row, "status": f"skipped (> {networkx_max_edges:g} edges)"})
                    continue
                outcome = graph_peers.measure(peer, task, n, src, dst, cap)
                if outcome[0] != "ok":
                    rows.append({**row, "status": outcome[0]})
                    print(f"{peer} {task}: {outcome[0]} {outcome[1:]}", flush=True)
                    continue
                _, load, seconds, result, peak = outcome
                row.update(status="ok", load_s=load, seconds=seconds, peak_rss_gib=peak)
                row["iterations"] = result.get("iterations", 20 if task == "pagerank-20" else "")
                if task == "pagerank-20":
                    row["iterations_per_s"] = 20 / seconds
                if peer == "scipy-1thread":
                    reference[task] = {"seconds": seconds, **result}
                if "rank" in result and task == "pagerank-tol" and task in reference:
                    row["l1_to_scipy"] = float(
                        np.abs(result["rank"] - reference[task]["rank"]).sum()
                    )
                if "components" in result:
                    row["components"] = result["components"]
                    row["agrees"] = result["components"] == reference[task]["components"]
                rows.append(row)
                print(f"{graph['name']} {peer} {task}: {seconds:.3f} s", flush=True)
        references.append(reference)
    with (
        LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            host="127.0.0.1",
        ) as cluster,
        Client(cluster) as client,
    ):
        warm_up(client)
        for graph, reference in zip(graphs, references):
            for row in run_taskdml(client, graph, reference, staleness):
                if row["task"] in reference:
                    row["ratio"] = row["seconds"] / reference[row["task"]]["seconds"]
                    if "iterations" in reference[row["task"]]:
                        row["scipy_iterations"] = reference[row["task"]]["iterations"]
                    per_iteration = reference[row["task"]]["seconds"] / max(
                        1, reference[row["task"]].get("iterations", 20)
                    )
                    row["superstep_ratio"] = row["superstep_s"] / per_iteration
                rows.append({"graph": graph["name"], "edges": graph["edges"], **row})
    return rows


def table(rows):
    lines = [
        "| graph | arcs | task | who | seconds | × scipy | iterations/s | iterations "
        "| partition s | superstep ms (× scipy's) | exchange ms | L1 to scipy / components "
        "| peak GiB |",
        "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for row in rows:
        head = f"| {row['graph']} | {row['edges']:,} | {row['task']} | {row['peer']} "
        if row["status"] != "ok":
            lines.append(head + f"| {row['status']} | | | | | | | | |")
            continue
        check = ""
        if "l1_to_scipy" in row:
            check = f"{row['l1_to_scipy']:.1e}"
        elif "components" in row:
            check = f"{row['components']:,}" + ("" if row["agrees"] else " (differs)")
        ratio = f"{row['ratio']:.2f}" if "ratio" in row else ""
        rate = f"{row['iterations_per_s']:.1f}" if "iterations_per_s" in row else ""
        partition = f"{row['partition_s']:.2f}" if "partition_s" in row else ""
        step = ""
        if "superstep_s" in row:
            step = f"{1e3 * row['superstep_s']:.1f}"
            if "superstep_ratio" in row and row["task"] != "components":
                step += f" ({row['superstep_ratio']:.2f})"
        exchange = f"{1e3 * row['exchange_s']:.1f}" if "exchange_s" in row else ""
        peak = row["peak_rss_gib"]
        peak = (
            " / ".join(f"{p:.2f}" for p in row["worker_peaks_gib"])
            if "worker_peaks_gib" in row
            else f"{peak:.2f}"
        )
        lines.append(
            head + f"| {row['seconds']:.3f} | {ratio} | {rate} | {row.get('iterations', '')} "
            f"| {partition} | {step} | {exchange} | {check} | {peak} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", nargs="+", type=float, default=[1e6])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cap", type=float, default=600.0, help="seconds per peer measurement")
    parser.add_argument("--networkx-max-edges", type=float, default=2e6)
    parser.add_argument(
        "--peers", nargs="+", choices=graph_peers.PEERS, default=list(graph_peers.PEERS)
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--note", default="", help="a sentence recorded with the results")
    parser.add_argument("--out-of-core", action="store_true", help="the out-of-core rows only")
    parser.add_argument("--scale", type=int, default=20)
    parser.add_argument("--edge-factor", type=int, default=200)
    parser.add_argument("--compare-edge-factor", type=int, default=16)
    parser.add_argument("--memory-limit", type=float, default=512, help="MiB per worker")
    parser.add_argument("--block-edges", type=int, default=None)
    parser.add_argument("--store", default="/tmp/taskdml-graph-ooc.zarr")
    parser.add_argument(
        "--staleness",
        nargs="*",
        type=int,
        default=[],
        help="also run pagerank-tol and components with these staleness bounds (rows "
        "'taskdml staleness=s')",
    )
    args = parser.parse_args(argv)
    if args.out_of_core:
        return main_out_of_core(args)
    if "scipy-1thread" not in args.peers:
        parser.error("--peers must include scipy-1thread: it is the reference")
    args.peers.remove("scipy-1thread")
    args.peers.insert(0, "scipy-1thread")
    load_before = os.getloadavg()
    began = time.perf_counter()
    rows = run(
        args.edges, args.workers, args.cap, args.networkx_max_edges, args.peers, args.staleness
    )
    wall = time.perf_counter() - began
    load_after = os.getloadavg()
    text = table(rows)
    print()
    print(text)
    command = "python benchmarks/graph.py " + " ".join(sys.argv[1:])
    stats = [
        f"{row['graph']}: "
        + ", ".join(
            f"partition {p}: {s['in_edges']:,} in-edges, {s['mirrors']:,} mirrors, "
            f"{s['sends']:,} sent per superstep"
            for p, s in enumerate(row["stats"])
        )
        for row in rows
        if "stats" in row
    ]
    body = "\n".join(
        [
            f"Command: `{command}` ({wall:.0f} s). Machine: {_results.machine_line()}.",
            f"Versions: {_results.versions_line(_results.versions(PACKAGES))}.",
            f"taskdml on {args.workers} worker processes of 1 thread each (LocalCluster); "
            f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after."
            + (f" {args.note}" if args.note else ""),
            "",
            text,
            "",
            "What moves per superstep (`PartitionedGraph.stats()`):",
            "",
            *[f"- {line}" for line in stats],
        ]
    )
    if not args.no_write:
        sizes = " and ".join(f"{e:g}" for e in args.edges)
        name = f"graph.py ({sizes} edges)"
        _results.write_section(_results.RESULTS, body, name, f"{TITLE}, {sizes} edges")
        print(f"\nupdated {_results.RESULTS}")


def main_out_of_core(args):
    load_before = os.getloadavg()
    began = time.perf_counter()
    rows = run_out_of_core(args)
    wall = time.perf_counter() - began
    text = out_of_core_table(rows)
    print()
    print(text)
    command = "python benchmarks/graph.py " + " ".join(sys.argv[1:])
    body = "\n".join(
        [
            f"Command: `{command}` ({wall:.0f} s). Machine: {_results.machine_line()}.",
            f"Versions: {_results.versions_line(_results.versions(PACKAGES))}.",
            f"Load average (1 min) {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after. "
            "PageRank of 20 supersteps on the limited workers; to tol 1e-10 in the comparison."
            + (f" {args.note}" if args.note else ""),
            "",
            text,
        ]
    )
    if not args.no_write:
        name = "graph.py (out of core)"
        title = "Graph parallelism: PageRank on a graph larger than the workers' memory (issue 26)"
        _results.write_section(_results.RESULTS, body, name, title)
        print(f"\nupdated {_results.RESULTS}")


if __name__ == "__main__":
    main()
