"""
Graph parallelism: labels and features spread over a partitioned graph
======================================================================

A graph of 6,000 accounts in three communities (a stochastic block model: dense inside a
community, sparse between them) is partitioned over two workers. Only 5 % of the accounts
carry a label. Vertex programs run where the partitions live, in supersteps whose boundary
values go straight from worker to worker:

- :func:`taskdml.graph.label_spreading` spreads the known labels over the graph, as
  scikit-learn's ``LabelSpreading`` does with the graph as its affinity;
- :func:`taskdml.graph.propagate_features` averages each account's features over its
  neighbourhood (SGC's ``S^k X``), and a linear classifier trained on them beats the same
  classifier on the raw features;
- :func:`taskdml.graph.pagerank` ranks the accounts.
"""

# %%
# A generated graph with its ground truth
# ---------------------------------------
# :func:`taskdml.datasets.make_sbm` draws the edges chunk by chunk on the workers and returns
# them as an ``xarray.Dataset`` (``src``, ``dst`` along ``edge``) with each vertex's
# ``community``.
import matplotlib.pyplot as plt
import numpy as np
from distributed import Client, LocalCluster
from sklearn.linear_model import LogisticRegression

import taskdml.datasets
import taskdml.graph

cluster = LocalCluster(
    n_workers=2,
    threads_per_worker=1,
    processes=False,
    protocol="tcp://",
    host="127.0.0.1",
    dashboard_address=":0",
)
client = Client(cluster)

graph = taskdml.datasets.make_sbm(
    [2000, 2000, 2000], p_in=0.01, p_out=0.002, random_state=0
)
community = graph.community.values
print(f"{graph.sizes['edge']:,} edges, {len(community):,} vertices")

# %%
# Spreading 5 % of the labels
# ---------------------------
rng = np.random.default_rng(0)
known = rng.random(len(community)) < 0.05
labels = np.where(known, community, -1)
spread = taskdml.graph.label_spreading(
    graph, labels, alpha=0.9, max_iter=50
)
accuracy = (spread.label.values[~known] == community[~known]).mean()
print(
    f"label spreading: {accuracy:.3f} of the unlabelled accounts right "
    f"after {spread.attrs['n_iter']} supersteps"
)

# %%
# Graph features for a linear classifier
# --------------------------------------
# Each account has 8 noisy features whose mean depends on its community. Averaged over two
# hops of the graph, the noise cancels and the community shows.
X = (
    rng.normal(size=(len(community), 8))
    + 0.3 * np.eye(3, 8)[community]
)
features = taskdml.graph.propagate_features(graph, X, k=2)
smoothed = features.features.values
train = known
raw = (
    LogisticRegression()
    .fit(X[train], community[train])
    .score(X[~train], community[~train])
)
graphed = (
    LogisticRegression()
    .fit(smoothed[train], community[train])
    .score(smoothed[~train], community[~train])
)
print(
    f"classifier on raw features: {raw:.3f}; on graph features: {graphed:.3f}"
)

# %%
# PageRank, and how the supersteps converged
# ------------------------------------------
ranks = taskdml.graph.pagerank(graph)
history = ranks.attrs["history"]
fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
left.semilogy(
    [h["superstep"] for h in history],
    [h["change"] for h in history],
    marker=".",
)
left.set(
    xlabel="superstep",
    ylabel="L1 change",
    title="PageRank converging",
)
right.bar(
    ["raw features", "graph features", "label spreading"],
    [raw, graphed, accuracy],
)
right.set(
    ylim=(0, 1),
    ylabel="accuracy on unlabelled accounts",
    title="5 % labelled",
)
fig.tight_layout()
plt.show()

client.close()
cluster.close()
