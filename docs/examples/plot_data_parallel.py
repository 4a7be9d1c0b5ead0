"""
Data-parallel training against one serial pass
==============================================

:func:`taskdml.train` trains one ``partial_fit`` model on many chunks at once: every worker
trains a replica on the chunks it holds, and the replicas are merged with the estimator
family's merge rule. This example trains the same ``SGDClassifier`` four ways on a small
cluster of two workers and draws the held-out accuracy after each epoch:

- ``sequential``: one replica walks every chunk in order, as a ``partial_fit`` loop would;
- ``sync`` with ``sync_every=1``: the replicas average their models after every chunk;
- ``sync`` with ``sync_every=4``: they train four chunks between merges (local SGD);
- ``async``: a parameter server absorbs each replica's update as it arrives.
"""

# %%
# Data and cluster
# ----------------
# Twelve chunks of 2,000 rows, and a ``LocalCluster`` of two single-threaded workers, threads
# of this process talking over TCP on 127.0.0.1. On a real cluster only the ``Client`` line
# changes.
import dask.array as da
import matplotlib.pyplot as plt
from distributed import Client, LocalCluster
from sklearn.datasets import make_classification
from sklearn.linear_model import SGDClassifier

import taskdml

X, y = make_classification(
    n_samples=30_000, n_features=20, n_informative=8, n_classes=3, class_sep=2.0, random_state=0
)
X_train, y_train = da.from_array(X[:24_000], chunks=2_000), da.from_array(y[:24_000], chunks=2_000)
held_out = (X[24_000:], y[24_000:])

cluster = LocalCluster(
    n_workers=2,
    threads_per_worker=1,
    processes=False,
    protocol="tcp://",
    host="127.0.0.1",
    dashboard_address=None,
)
client = Client(cluster)

# %%
# Four trainings
# --------------
# ``validation`` scores the model after every epoch; the scores are in ``result.history``.
ways = {
    "sequential": {"strategy": "sequential"},
    "sync, sync_every=1": {"strategy": "sync", "sync_every": 1},
    "sync, sync_every=4": {"strategy": "sync", "sync_every": 4},
    "async": {"strategy": "async"},
}
results = {}
for label, options in ways.items():
    results[label] = taskdml.train(
        SGDClassifier(loss="log_loss", random_state=0),
        X_train,
        y_train,
        classes=[0, 1, 2],
        epochs=5,
        random_state=0,
        validation=held_out,
        **options,
    )
    print(f"{label:>20}: accuracy {results[label].estimator.score(*held_out):.3f}")

# %%
# Accuracy per epoch
# ------------------
# The merged models learn as fast per epoch as the serial pass here: averaging after every
# chunk costs a little accuracy early on, and the async server's order of updates depends on
# timing, so its curve changes from run to run.
fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
for label, result in results.items():
    epochs = [entry["epoch"] for entry in result.history]
    scores = [entry["validation_score"] for entry in result.history]
    ax.plot(epochs, scores, marker="o", label=label)
ax.set_xlabel("epoch")
ax.set_ylabel("held-out accuracy")
ax.set_xticks(range(1, 6))
ax.legend()
plt.show()

client.close()
cluster.close()
