"""
Data-parallel training against one serial pass
==============================================

:func:`taskdml.parallel.train` trains one ``partial_fit`` model on many chunks at once: every worker
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
    n_samples=30_000,
    n_features=20,
    n_informative=8,
    n_classes=3,
    class_sep=2.0,
    random_state=0,
)
X_train = da.from_array(X[:24_000], chunks=2_000)
y_train = da.from_array(y[:24_000], chunks=2_000)
held_out = (X[24_000:], y[24_000:])

cluster = LocalCluster(
    n_workers=2,
    threads_per_worker=1,
    processes=False,
    protocol="tcp://",
    host="127.0.0.1",
    dashboard_address=":0",
)
client = Client(cluster)

# %%
# Four trainings
# --------------
# ``validation`` scores the model after every epoch; the scores are in ``result.history``
# (one entry per epoch, or one for the whole training with ``async``), and ``result.stats``
# holds facts of the run such as its wall time.
ways = {
    "sequential": {"strategy": "sequential"},
    "sync, sync_every=1": {"strategy": "sync", "sync_every": 1},
    "sync, sync_every=4": {"strategy": "sync", "sync_every": 4},
    "async": {"strategy": "async"},
}
results = {}
for label, options in ways.items():
    results[label] = taskdml.parallel.train(
        SGDClassifier(loss="log_loss", random_state=0),
        X_train,
        y_train,
        classes=[0, 1, 2],
        epochs=5,
        random_state=0,
        validation=held_out,
        **options,
    )
    score = results[label].estimator.score(*held_out)
    print(f"{label:>20}: accuracy {score:.3f}")

# %%
# Accuracy per epoch
# ------------------
# On this data the averaged models score as well as the serial pass, or better: averaging
# replicas smooths the noise of SGD's last steps. That is not a promise; an averaged merge
# approaches one serial pass, it does not equal it, and longer sync periods drift further.
# The async result depends on the order in which updates reach the server, so it changes
# from run to run.
fig, (curves, final) = plt.subplots(
    1, 2, figsize=(9, 3.5), layout="constrained"
)
for label, result in results.items():
    if label == "async":
        continue
    epochs = [entry["epoch"] for entry in result.history]
    scores = [entry["validation_score"] for entry in result.history]
    curves.plot(epochs, scores, marker="o", label=label)
curves.set_xlabel("epoch")
curves.set_ylabel("held-out accuracy")
curves.set_xticks(range(1, 6))
curves.legend()
labels = list(results)
scores = [
    results[label].estimator.score(*held_out) for label in labels
]
final.barh(labels, scores)
final.set_xlim(0.5, 1.0)
final.invert_yaxis()
final.set_xlabel("held-out accuracy after 5 epochs")
plt.show()

client.close()
cluster.close()
