"""
An ASHA search over data-parallel trials
========================================

:class:`taskdml.ASHASearchCV` samples candidates and trains each with ``partial_fit``, one
epoch at a time, on chunked data. Asynchronous successive halving (ASHA) promotes a trial to
the next rung of epochs as soon as it is in the top ``1 / reduction_factor`` of the trials that
reached its rung, without waiting for the others, so the workers never idle at a rung's end.

Each trial's curve below is its validation score against the epochs it trained: most stop
after one epoch, a few reach the last rung.
"""

# %%
# Data, cluster and search
# ------------------------
import matplotlib.pyplot as plt
from distributed import Client, LocalCluster
from scipy.stats import loguniform
from sklearn.linear_model import SGDClassifier

import taskdml
from taskdml.datasets import make_classification
from taskdml.model_selection import trials_frame

cluster = LocalCluster(
    n_workers=2,
    threads_per_worker=1,
    processes=False,
    protocol="tcp://",
    host="127.0.0.1",
    dashboard_address=":0",
)
client = Client(cluster)

# an xarray Dataset of chunked dask arrays, made inside tasks
data = make_classification(
    n_samples=8_000,
    n_features=10,
    n_informative=4,
    class_sep=1.5,
    chunk_size=800,
    random_state=0,
)
space = {
    "alpha": loguniform(1e-6, 1e-1),
    "penalty": ["l2", "l1", "elasticnet"],
    "loss": ["hinge", "log_loss"],
}
search = taskdml.ASHASearchCV(
    SGDClassifier(random_state=0),
    space,
    n_trials=12,
    max_epochs=9,
    reduction_factor=3,
    random_state=0,
)
search.fit(data)
print(f"best score {search.best_score_:.3f} with")
for name, value in search.best_params_.items():
    shown = value if isinstance(value, str) else f"{value:.2g}"
    print(f"  {name} = {shown}")

# %%
# The trials
# ----------
# :func:`taskdml.model_selection.trials_frame` gives one row per trial; ``model_history_``
# keeps every score a trial reported, in dask-ml's format.
columns = [
    "alpha",
    "penalty",
    "loss",
    "budget",
    "score",
    "state",
]
print(trials_frame(search)[columns].round(4))

fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
for records in search.model_history_.values():
    epochs = [record["partial_fit_calls"] for record in records]
    scores = [record["score"] for record in records]
    ax.plot(epochs, scores, marker="o", alpha=0.8)
ax.set_xscale("log", base=3)
ax.set_xticks([1, 3, 9], ["1", "3", "9"])
ax.set_xlabel("epochs trained")
ax.set_ylabel("validation score")
ax.set_title("ASHA: 12 trials, rungs at 1, 3 and 9 epochs")
plt.show()

client.close()
cluster.close()
