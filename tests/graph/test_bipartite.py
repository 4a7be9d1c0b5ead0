"""Bipartite graphs on the workers and ML on them: the partitions against counts made here;
ALS against a numpy loop written below (Spark MLlib's formulation) and the planted noise of a
generated rating graph; SGD factorisation against a mini-batch loop and ALS; sparse logistic
regression against a mini-batch loop and scikit-learn's SGDClassifier."""

import functools

import numpy as np
import pytest
import scipy.sparse as sp

from taskdml.datasets import make_ratings, split_edges
from taskdml.graph import (
    als,
    edges_from_scipy,
    partition_bipartite,
    sgd_factorize,
    sparse_logistic_regression,
)


@functools.lru_cache
def _ratings(n_users=240, n_items=90, density=0.12, seed=0):
    """A planted rank-3 rating graph with noise 0.1, in chunks of 800 edges (built once)."""
    graph = make_ratings(n_users, n_items, rank=3, density=density, noise=0.1, random_state=seed)
    return graph.chunk({"edge": 800})


def reference_als(users, items, ratings, n_users, n_items, U, rank, reg, n_iter, weighted):
    """ALS as MLlib states it, one vertex at a time: items from the user factors, then users
    from the item factors; lambda = reg * n_ratings (weighted) or reg; no ratings: zeros."""

    def half(rows, cols, n_rows, F):
        out = np.zeros((n_rows, rank))
        for r in range(n_rows):
            mine = rows == r
            if not mine.any():
                continue
            Fr = F[cols[mine]]
            lam = reg * (mine.sum() if weighted else 1.0)
            out[r] = np.linalg.solve(Fr.T @ Fr + lam * np.eye(rank), Fr.T @ ratings[mine])
        return out

    rmse = []
    for _ in range(n_iter):
        V = half(items, users, n_items, U)
        U = half(users, items, n_users, V)
        rmse.append(np.sqrt(np.mean((ratings - (U[users] * V[items]).sum(1)) ** 2)))
    return U, V, rmse


@pytest.mark.parametrize("n_partitions", [2, 3])
def test_partitions_hold_each_users_and_each_items_ratings(client, n_partitions):
    """Each partition holds the ratings of its user range and of its item range, and mirrors
    exactly the distinct items its users rated and users its items were rated by (counted
    here from the edges); 3 partitions on 2 workers share one."""
    graph = _ratings()
    parted = partition_bipartite(graph, n_partitions, client=client)
    src, dst = graph.src.values, graph.dst.values
    users = np.linspace(0, 240, n_partitions + 1).round()
    items = np.linspace(0, 90, n_partitions + 1).round()
    expected = []
    for p in range(n_partitions):
        by_user = (src >= users[p]) & (src < users[p + 1])
        by_item = (dst >= items[p]) & (dst < items[p + 1])
        expected.append(
            {
                "users": int(users[p + 1] - users[p]),
                "items": int(items[p + 1] - items[p]),
                "ratings": int(by_user.sum()),
                "item_mirrors": len(np.unique(dst[by_user])),
                "user_mirrors": len(np.unique(src[by_item])),
            }
        )
    assert parted.stats() == expected
    assert len(set(parted.workers)) == 2


@pytest.mark.parametrize(
    ("n_partitions", "weighted"), [(1, True), (2, True), (3, False)], ids=["1", "2", "3-plain"]
)
def test_als_equals_a_numpy_loop_from_the_same_start(client, n_partitions, weighted):
    """ALS on 1, 2 or 3 partitions gives the factors and the training RMSE per iteration of
    the one-vertex-at-a-time loop above, from the same initial user factors, to 1e-8; a user
    with no rating (user 0 here) gets zeros in both."""
    graph = _ratings()
    keep = graph.src.values != 0
    graph = graph.isel(edge=np.flatnonzero(keep)).chunk({"edge": 800})
    rank, reg, n_iter = 3, 0.05, 6
    U0 = np.random.default_rng(1).standard_normal((240, rank))
    model = als(
        graph,
        rank,
        reg,
        n_iter,
        weighted_reg=weighted,
        init=U0,
        n_partitions=n_partitions,
        client=client,
    )
    users, items, ratings = graph.src.values, graph.dst.values, graph.weight.values
    U, V, rmse = reference_als(users, items, ratings, 240, 90, U0, rank, reg, n_iter, weighted)
    assert model.user_factors.factors.data.chunks[0] == tuple(model.graph.sizes("user"))
    np.testing.assert_allclose(model.user_factors.factors.values, U, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(model.item_factors.factors.values, V, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose([h["rmse"] for h in model.history], rmse, rtol=1e-8)
    assert not model.user_factors.factors.values[0].any()
    assert model.n_iter_ == n_iter


def test_als_held_out_rmse_is_near_the_planted_noise(client):
    """On a planted rank-3 model with noise 0.1, ALS at rank 3 predicts a held-out quarter of
    the ratings within 25% of the RMSE of the planted factors themselves (the noise), far
    below the ratings' own spread; the prediction made where the test edges are equals the
    one made here."""
    graph = _ratings(n_users=400, n_items=120, density=0.2, seed=2)
    train, test = split_edges(graph, test_size=0.25, random_state=0)
    model = als(train, rank=3, reg=0.001, n_iter=10, random_state=0, client=client)
    U, V = graph.user_factors.values, graph.item_factors.values
    src, dst, rating = test.src.values, test.dst.values, test.weight.values
    planted = np.sqrt(np.mean((rating - (U[src] * V[dst]).sum(1)) ** 2))
    held_out = model.rmse(test)
    assert planted <= held_out < 1.25 * planted
    assert held_out < 0.15 * float(rating.std())
    assert model.history[-1]["rmse"] < planted  # fitted: training error below the noise
    here = model.predict(src, dst)
    np.testing.assert_allclose(model.predict(test.src.data, test.dst.data).compute(), here)
    np.testing.assert_allclose(np.sqrt(np.mean((rating - here) ** 2)), held_out, rtol=1e-12)


def test_als_does_not_depend_on_the_partitioning_or_the_cluster(client):
    """From random_state alone, ALS on 2 partitions on the cluster and on 3 in this process
    (no client), from edges chunked differently, gives the same factors: the initial factors
    are drawn per vertex block, not per partition, and a partition's ratings are ordered by
    (vertex, neighbour) whatever chunks they came from."""
    graph = _ratings()
    on_cluster = als(graph, 3, 0.05, 4, random_state=7, n_partitions=2, client=client)
    rechunked = graph.chunk({"edge": 333})
    here = als(rechunked, 3, 0.05, 4, random_state=7, n_partitions=3, client=False)
    for side in ("user_factors", "item_factors"):
        np.testing.assert_allclose(
            getattr(on_cluster, side).factors.values,
            getattr(here, side).factors.values,
            rtol=1e-10,
            atol=1e-12,
        )


def reference_sgd(users, items, ratings, U, V, reg, lr, n_epochs, n_batches, seed):
    """Mini-batch SGD on one machine: the ratings in (user, item) order, shuffled each epoch
    by ``default_rng([seed, epoch, 0])``, cut in *n_batches*; each rating's gradient taken
    at the values before the batch, vertex by vertex."""
    order = np.lexsort((items, users))
    users, items, ratings = users[order], items[order], ratings[order]
    U, V = U.copy(), V.copy()
    for epoch in range(n_epochs):
        shuffled = np.random.default_rng([seed, epoch, 0]).permutation(len(ratings))
        for batch in np.array_split(shuffled, n_batches):
            dU, dV = np.zeros_like(U), np.zeros_like(V)
            for e in batch:
                u, i = users[e], items[e]
                error = U[u] @ V[i] - ratings[e]
                dU[u] -= lr * (error * V[i] + reg * U[u])
                dV[i] -= lr * (error * U[u] + reg * V[i])
            U, V = U + dU, V + dV
    return U, V


def test_sgd_on_one_partition_equals_a_mini_batch_loop(client):
    """SGD on one partition (its GlobalSync a no-op) gives the factors of the
    rating-by-rating loop above, from the same start and shuffles, to 1e-10."""
    graph = _ratings()
    rng = np.random.default_rng(3)
    U0, V0 = 0.5 * rng.standard_normal((240, 3)), 0.5 * rng.standard_normal((90, 3))
    settings = {"reg": 0.01, "learning_rate": 0.05, "n_epochs": 3, "n_batches": 4}
    model = sgd_factorize(
        graph, 3, init=(U0, V0), random_state=5, n_partitions=1, client=client, **settings
    )
    users, items, ratings = graph.src.values, graph.dst.values, graph.weight.values
    U, V = reference_sgd(
        users, items, ratings, U0, V0, seed=5, lr=0.05, reg=0.01, n_epochs=3, n_batches=4
    )
    np.testing.assert_allclose(model.user_factors.factors.values, U, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model.item_factors.factors.values, V, rtol=1e-10, atol=1e-12)
    training = np.sqrt(np.mean((ratings - (U[users] * V[items]).sum(1)) ** 2))
    np.testing.assert_allclose(model.history[-1]["rmse"], training, rtol=1e-10)


def test_sgd_on_two_partitions_reaches_the_test_rmse_of_als(client):
    """SGD on 2 partitions, item vectors averaged at each GlobalSync (every 3 of 8
    mini-batches and at each epoch's end), predicts the held-out ratings within 5% of ALS's
    test RMSE."""
    graph = _ratings(n_users=400, n_items=120, density=0.2, seed=2)
    train, test = split_edges(graph, test_size=0.25, random_state=0)
    reference = als(train, rank=3, reg=0.001, n_iter=10, random_state=0, client=client).rmse(test)
    model = sgd_factorize(
        train,
        rank=3,
        reg=0.01,
        learning_rate=0.05,
        n_epochs=40,
        n_batches=8,
        sync_every=3,
        random_state=0,
        n_partitions=2,
        client=client,
    )
    assert model.rmse(test) < 1.05 * reference
    rmse = [h["rmse"] for h in model.history]
    assert rmse[-1] < 0.1 < rmse[0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rank": 0}, r"als needs rank >= 1, n_iter >= 1 and reg >= 0; got rank=0"),
        ({"reg": -1.0}, r"reg=-1.0"),
        ({"init": np.zeros((3, 2))}, r"init must have shape \(n_users, rank\) = \(240, 3\)"),
    ],
)
def test_als_rejects_bad_arguments(kwargs, match):
    """Bad arguments are refused with a message naming them."""
    arguments = {"rank": 3, "client": False, **kwargs}
    with pytest.raises(ValueError, match=match):
        als(_ratings(), **arguments)


def _sparse_problem(n=1200, d=300, seed=0):
    """A sparse linearly separable-with-noise table: X (3% dense), labels 0/1."""
    X = sp.random(n, d, density=0.03, format="csr", random_state=seed + 1)
    rng = np.random.default_rng(seed)
    y = ((X @ (2 * rng.standard_normal(d))) + 0.3 * rng.standard_normal(n) > 0).astype(int)
    return X, y


def reference_logistic(X, labels, bounds, alpha, lr, n_epochs, n_batches, seed):
    """Mini-batch gradient descent on one machine: global batch b of an epoch is the union
    over the sample ranges [bounds[p], bounds[p + 1]) of the b-th part of that range's
    labelled samples shuffled by default_rng([seed, epoch, p]); the L2 step only on the
    features the batch uses."""
    w, b = np.zeros(X.shape[1]), 0.0
    for epoch in range(n_epochs):
        parts = []
        for p in range(len(bounds) - 1):
            mine = np.flatnonzero(labels[bounds[p] : bounds[p + 1]] >= 0)
            order = mine[np.random.default_rng([seed, epoch, p]).permutation(len(mine))]
            parts.append(np.array_split(order + bounds[p], n_batches))
        for k in range(n_batches):
            batch = np.concatenate([part[k] for part in parts])
            Xb = X[batch]
            error = 1 / (1 + np.exp(-(Xb @ w + b))) - labels[batch]
            used = np.unique(Xb.indices)
            gradient = Xb.T @ error
            w[used] -= lr * (gradient[used] / len(batch) + alpha * w[used])
            b -= lr * error.sum() / len(batch)
    return w, b


@pytest.mark.parametrize("n_partitions", [1, 2, 3])
def test_sparse_logistic_regression_equals_mini_batch_gradient_descent(client, n_partitions):
    """Logistic regression on the sample-feature graph, on 1, 2 or 3 partitions (weights
    owned by feature ranges, gradients of the touched features sent to their owners), equals
    the global mini-batch loop above to 1e-10; unlabelled samples are scored, not trained on."""
    X, y = _sparse_problem(n=400, d=120)
    labels = np.where(np.arange(400) % 4 == 0, -1, y)
    settings = {"alpha": 1e-3, "learning_rate": 2.0, "n_epochs": 3, "n_batches": 4}
    model = sparse_logistic_regression(
        edges_from_scipy(X, chunk_size=500),
        labels,
        random_state=3,
        n_partitions=n_partitions,
        client=client,
        **settings,
    )
    bounds = np.linspace(0, 400, n_partitions + 1).round().astype(int)
    w, b = reference_logistic(
        X, labels, bounds, 1e-3, 2.0, settings["n_epochs"], settings["n_batches"], seed=3
    )
    np.testing.assert_allclose(model.coef.coef.values, w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model.intercept, b, rtol=1e-10, atol=1e-12)
    expected = 1 / (1 + np.exp(-(X @ w + b)))
    np.testing.assert_allclose(model.samples.probability.values, expected, rtol=1e-10)


def test_sparse_logistic_regression_is_as_accurate_as_sgdclassifier(client):
    """Trained on 900 of 1,200 samples (the others labelled -1), its held-out accuracy is
    within 3 points of scikit-learn's SGDClassifier(log_loss) fitted on the same 900."""
    from sklearn.linear_model import SGDClassifier

    X, y = _sparse_problem()
    train = np.arange(1200) < 900
    peer = SGDClassifier(loss="log_loss", alpha=1e-4, random_state=0).fit(X[train], y[train])
    model = sparse_logistic_regression(
        edges_from_scipy(X, chunk_size=1000),
        np.where(train, y, -1),
        alpha=1e-4,
        learning_rate=5.0,
        n_epochs=30,
        random_state=0,
        client=client,
    )
    predicted = model.samples.label.values[~train]
    accuracy = (predicted == y[~train]).mean()
    assert accuracy >= peer.score(X[~train], y[~train]) - 0.03
    assert accuracy > max(y[~train].mean(), 1 - y[~train].mean()) + 0.2
    loss = [h["log_loss"] for h in model.history]
    assert loss[-1] < loss[0]


def test_a_failing_partition_stops_als_with_its_own_error(client):
    """Without regularisation, an item whose raters all start at zero has zero normal
    equations: its partition's LinAlgError reaches the caller, and the other partition,
    waiting for its factors, stops instead of hanging."""
    graph = _ratings()
    init = np.random.default_rng(0).standard_normal((240, 3))
    init[graph.src.values[graph.dst.values == 80]] = 0.0  # item 80: partition 1's
    with pytest.raises(np.linalg.LinAlgError, match="Singular"):
        als(graph, rank=3, reg=0.0, n_iter=2, init=init, n_partitions=2, client=client)


def test_als_is_one_task_per_partition_and_an_event_per_iteration(client):
    """However many iterations, the cluster runs one ALS task per partition (and one that
    reads the history): the exchanged factors never become tasks nor pass through the
    client; inside a run's scope rank 0 publishes each iteration's RMSE as a superstep
    event."""
    from distributed import get_task_stream

    from taskdml import _events

    graph = partition_bipartite(_ratings(), 3, client=client)
    client.gather(graph.partitions)
    with get_task_stream(client) as stream, _events.scope("run-als-test", "factorize"):
        model = als(graph, 3, 0.05, 5, random_state=0)
    keys = [task["key"] for task in stream.data]
    runs = [key for key in keys if "-als-" in str(key)]
    assert sorted(key[1] for key in runs) == [0, 1, 2]
    assert len(keys) == len(runs) + 1
    events = [
        e
        for _, e in client.get_events(_events.TOPIC)
        if e.get("run_id") == "run-als-test" and e["event"] == "superstep"
    ]
    assert [(e["superstep"], e["rmse"]) for e in events] == [
        (h["superstep"], h["rmse"]) for h in model.history
    ]


@pytest.mark.parametrize(
    ("edges", "n_partitions", "match"),
    [
        ({"src": [0, 5], "dst": [0, 1]}, 2, r"src holds vertex 5, outside 0 \.\. 3"),
        ({"src": [0, 1], "dst": [0, -1]}, 2, r"dst holds vertex -1, outside 0 \.\. 2"),
        ({"src": [0, 1], "dst": [0, 1]}, -1, r"n_partitions must be at least 1; got -1"),
    ],
)
def test_partition_bipartite_rejects_bad_graphs(client, edges, n_partitions, match):
    """Vertex ids outside the graph's shape (found where the edges are) and a bad number of
    partitions are refused with a message naming them."""
    import xarray as xr

    graph = xr.Dataset(
        {k: ("edge", np.asarray(v, dtype=np.int64)) for k, v in edges.items()},
        attrs={"shape": [4, 3], "directed": True},
    )
    with pytest.raises(ValueError, match=match):
        parted = partition_bipartite(graph, n_partitions, client=client)
        client.gather(parted.partitions)


def test_the_graph_models_go_through_the_step_cache_by_their_parts(client, tmp_path):
    """A pipeline step's cache writes ALS's and logistic regression's models part by part
    (the factors and weights as Zarr, where they are; no client pickled) and reads them back
    lazily: the factors, the history and the held-out RMSE (computed here from the factors
    read back) are the model's, and the weights are the mini-batch loop's."""
    from taskdml.cache._codec import decode, encode

    graph = _ratings()
    train, test = split_edges(graph, test_size=0.25, random_state=0)
    model = als(train, rank=3, reg=0.01, n_iter=3, random_state=0, client=client)
    node = encode({"model": model}, str(tmp_path), "factors", client)
    assert node["items"]["model"]["kind"] == "sharded"  # the parts, not one pickle
    back = decode(node, str(tmp_path), client)["model"]
    assert back.graph is None and back.history == model.history
    U, V = back.user_factors.factors.values, back.item_factors.factors.values
    np.testing.assert_array_equal(U, model.user_factors.factors.values)
    np.testing.assert_array_equal(V, model.item_factors.factors.values)
    src, dst, rating = test.src.values, test.dst.values, test.weight.values
    expected = np.sqrt(np.mean((rating - (U[src] * V[dst]).sum(1)) ** 2))
    assert back.rmse(test) == pytest.approx(expected, rel=1e-12)

    X, y = _sparse_problem(n=200, d=60)
    settings = {"alpha": 1e-3, "learning_rate": 2.0, "n_epochs": 2, "n_batches": 2}
    logistic = sparse_logistic_regression(
        edges_from_scipy(X, chunk_size=500),
        y,
        random_state=3,
        n_partitions=2,
        client=client,
        **settings,
    )
    node = encode(logistic, str(tmp_path), "logistic", client)
    back = decode(node, str(tmp_path), client)
    w, b = reference_logistic(X, y, [0, 100, 200], 1e-3, 2.0, 2, 2, seed=3)
    np.testing.assert_allclose(back.coef.coef.values, w, rtol=1e-10, atol=1e-12)
    assert back.intercept == pytest.approx(b, rel=1e-10, abs=1e-12)
    assert back.history == logistic.history


def test_a_plain_call_step_gets_an_als_model_from_a_graph_step(client, tmp_path):
    """A pipeline's plain ``call:`` (a worker task) takes the model of an ``als`` step: the
    graph's client stays in the client, the factors arrive; the RMSE it computes is the one
    computed here from the step's factors."""
    from taskdml import loads_pipeline, run_pipeline

    text = (
        "taskdml: 1\nname: als_then_plain\n"
        "imports: {allow: ['taskdml.*', pipeline_functions]}\nsteps:\n"
        "  ratings:\n    call: taskdml.datasets:make_ratings\n"
        "    with: {n_users: 300, n_items: 80, density: 0.1, rank: 3, random_state: 0}\n"
        "  factors:\n    call: taskdml.graph:als\n    inputs: {ratings: ratings}\n"
        "    with: {rank: 3, n_iter: 3, random_state: 0}\n"
        "  score:\n    call: pipeline_functions:factor_rmse\n"
        "    inputs: {model: factors, ratings: ratings}\n"
    )
    run = run_pipeline(loads_pipeline(text), client, run_root=tmp_path)
    model = run.outputs["factors"]["result"]
    ratings = run.outputs["ratings"]["result"]
    U, V = model.user_factors.factors.values, model.item_factors.factors.values
    src, dst, rating = ratings.src.values, ratings.dst.values, ratings.weight.values
    expected = np.sqrt(np.mean((rating - (U[src] * V[dst]).sum(1)) ** 2))
    assert run.outputs["score"]["result"].result() == pytest.approx(expected, rel=1e-12)
