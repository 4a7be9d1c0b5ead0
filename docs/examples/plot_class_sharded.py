"""
Model parallelism: classes sharded across workers
=================================================

A one-vs-rest linear classifier holds one row of ``coef_`` per class. With many classes and
many features it outgrows one worker. :class:`taskdml.ClassSharded` splits the classes into
shards, one per worker by default, and trains every shard on every chunk on its own worker:
the chunks travel to the shards, the coefficients never leave them.

The result is the unsharded model's: the same chunks in the same order give the same
``coef_``, bit for bit. This example trains 12 classes in 2 shards and checks it.
"""

# %%
# Data and cluster
# ----------------
# Each class lifts one feature, so the learned coefficients show a diagonal.
import dask.array as da
import matplotlib.pyplot as plt
import numpy as np
from distributed import Client, LocalCluster
from sklearn.linear_model import SGDClassifier

import taskdml

n_samples, n_features, n_classes, chunk = 12_000, 24, 12, 2_000
rng = np.random.default_rng(0)
y = rng.integers(0, n_classes, n_samples)
X = rng.normal(size=(n_samples, n_features))
X[np.arange(n_samples), 2 * y] += 2.5
X_chunks = da.from_array(X, chunks=(chunk, n_features))
y_chunks = da.from_array(y, chunks=chunk)

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
# Train the sharded model
# -----------------------
# ``model.shards_`` holds one future per shard; the shard stays on the worker that trained it.
model = taskdml.ClassSharded(
    SGDClassifier(random_state=0), n_shards=2
)
model.fit(X_chunks, y_chunks, classes=np.arange(n_classes))
holders = client.who_has(model.shards_)
for number, future in enumerate(model.shards_):
    print(f"shard {number} is held by {holders[future.key][0]}")

# %%
# Compare with the unsharded model
# --------------------------------
# ``partial_fit`` over the same chunks in the same order, in this process. Gathering the
# shards to the client is for the comparison only: a model too large for one worker would
# not fit here either. Predictions are a dask array, computed chunk by chunk on the shards'
# workers.
reference = SGDClassifier(random_state=0)
for start in range(0, n_samples, chunk):
    rows = slice(start, start + chunk)
    reference.partial_fit(
        X[rows], y[rows], classes=np.arange(n_classes)
    )

shards = client.gather(model.shards_)
binary = [
    estimator for shard in shards for estimator in shard.estimators
]
coef = np.vstack([estimator.coef_ for estimator in binary])
print(
    "coef_ equal bit for bit:", np.array_equal(coef, reference.coef_)
)
predicted = model.predict(X_chunks).compute()
print(
    "same predictions:",
    np.array_equal(predicted, reference.predict(X)),
)

# %%
# The coefficients, shard by shard
# --------------------------------
fig, ax = plt.subplots(figsize=(7, 3.5), layout="constrained")
largest = np.abs(coef).max()
image = ax.imshow(coef, cmap="RdBu_r", vmin=-largest, vmax=largest)
first = len(shards[0].classes)
ax.axhline(first - 0.5, color="black", linewidth=2)
last = n_classes - 1
ax.set_title(
    f"classes 0-{first - 1} on shard 0, {first}-{last} on shard 1"
)
ax.set_xlabel("feature")
ax.set_ylabel("class")
fig.colorbar(image, ax=ax, label="coef_")
plt.show()

client.close()
cluster.close()
