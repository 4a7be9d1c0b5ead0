"""
Federated training across three silos
=====================================

Three parties each hold data that must not leave them. :func:`taskdml.train_federated`
trains one model across them with FedAvg: each round, every silo receives the global model,
trains it for ``local_epochs`` on its own chunks on its own worker, and sends back only the
model and its row count; the coordinator averages them.

Here the digits data set is split by label: silo A holds the digits 0 to 3, silo B 4 to 6,
silo C 7 to 9. Alone, a silo cannot learn the classes it never sees; together they learn all
ten.
"""

# %%
# Silos pinned to their workers
# -----------------------------
# A :class:`taskdml.Silo` names a loader, its arguments, and where it may run: here one
# worker each (``workers=``); on a real deployment, workers started inside each party's
# network, named or given a Dask resource per silo. The loader runs on that worker and its
# chunks never leave it.
import matplotlib.pyplot as plt
import numpy as np
from distributed import Client, LocalCluster
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier

import taskdml


def load_digits_with(labels, chunk=100):
    """Rows of the digits with a label in *labels*, in chunks."""
    digits = load_digits()
    X, y = digits.data[:1500] / 16.0, digits.target[:1500]
    keep = np.isin(y, labels)
    X, y = X[keep], y[keep]
    starts = range(0, len(X), chunk)
    return [(X[i : i + chunk], y[i : i + chunk]) for i in starts]


cluster = LocalCluster(
    n_workers=3,
    threads_per_worker=1,
    processes=False,
    protocol="tcp://",
    host="127.0.0.1",
    dashboard_address=":0",
)
client = Client(cluster)
addresses = sorted(client.scheduler_info()["workers"])
labels = {
    "silo_a": [0, 1, 2, 3],
    "silo_b": [4, 5, 6],
    "silo_c": [7, 8, 9],
}
silos = [
    taskdml.Silo(
        name, load_digits_with, {"labels": wanted}, workers=[address]
    )
    for (name, wanted), address in zip(labels.items(), addresses)
]

# %%
# Train
# -----
# ``eval_set`` scores the global model on held-out rows after every round.
digits = load_digits()
held_out = (digits.data[1500:] / 16.0, digits.target[1500:])
result = taskdml.train_federated(
    SGDClassifier(random_state=0),
    silos,
    rounds=10,
    local_epochs=1,
    classes=np.arange(10),
    eval_set=held_out,
    random_state=0,
)
print("rows per silo:", result.n_samples)
n_rounds, last = len(result.history), result.history[-1]["score"]
print(f"held-out accuracy after {n_rounds} rounds: {last:.3f}")

# %%
# Against each silo alone
# -----------------------
# A model trained by one silo on its own rows for as many epochs only knows its own labels.
alone = {}
for name, wanted in labels.items():
    model = SGDClassifier(random_state=0)
    for _ in range(10):
        for X, y in load_digits_with(wanted):
            model.partial_fit(X, y, classes=np.arange(10))
    alone[name] = model.score(*held_out)

fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
rounds = range(1, len(result.history) + 1)
scores = [entry["score"] for entry in result.history]
ax.plot(rounds, scores, marker="o", label="FedAvg, 3 silos")
for (name, score), style in zip(alone.items(), [":", "--", "-."]):
    ax.axhline(
        score, linestyle=style, color="grey", label=f"{name} alone"
    )
ax.set_xlabel("round")
ax.set_ylabel("held-out accuracy")
ax.set_ylim(0, 1)
ax.legend(loc="center right")
plt.show()

client.close()
cluster.close()
