"""
A pipeline file, run from Python
================================

A pipeline file declares the steps and their inputs; taskdml validates it, starts a cluster
and runs it. ``taskdml run sweep.yaml`` does it from the command line;
:func:`taskdml.load_pipeline` and :func:`taskdml.run_pipeline` do the same from Python, and
return the run's metrics and outputs.

This pipeline makes chunked data, scales it with an exact data-parallel fit, and trains one
classifier per value of ``alpha`` with a ``foreach`` fan-out: the three trainings are
independent, so they run side by side (task parallelism), each of them data-parallel.
"""

# %%
# The file
# --------
# ``${params.seed}`` is interpolated from ``params``; ``cluster`` asks for an embedded
# ``LocalCluster`` of two single-threaded workers (threads of this process, to start fast).
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt

import taskdml

PIPELINE = """
taskdml: 1
name: sweep
params: {seed: 0}
cluster:
  n_workers: 2
  threads_per_worker: 1
  processes: false
  dashboard_address: ":0"
steps:
  data:
    call: taskdml.datasets:make_classification
    with:
      n_samples: 20_000
      n_features: 20
      n_informative: 6
      class_sep: 2.0
      chunk_size: 2_500
      random_state: ${params.seed}
  split:
    call: taskdml.datasets:train_test_split
    inputs: {data: data}
    with: {test_size: 0.25, random_state: "${params.seed}"}
    outputs: [train, test]
  scale:
    fit: sklearn.preprocessing:StandardScaler
    inputs: {data: split.train}
  model:
    fit: sklearn.linear_model:SGDClassifier
    with: {loss: log_loss, random_state: "${params.seed}"}
    foreach: {alpha: [1.0e-5, 1.0e-3, 1.0e-1]}
    parallel:
      epochs: 3
      sync_every: 2
      random_state: ${params.seed}
    inputs: {data: split.train, preprocess: scale}
  report:
    evaluate: [accuracy, roc_auc]
    inputs: {model: model, data: split.test, preprocess: scale}
"""

folder = Path(tempfile.mkdtemp())
path = folder / "sweep.yaml"
size = path.write_text(PIPELINE)

# %%
# Validate and run
# ----------------
# ``load_pipeline`` checks the whole file before anything runs (unknown keys, steps or
# estimator parameters, callables outside ``imports.allow``) and takes command-line style
# overrides. The run is recorded in ``run_root``: its manifest, metrics, model and pictures.
pipeline = taskdml.load_pipeline(path, ["seed=1"])
run = taskdml.run_pipeline(pipeline, run_root=folder / "runs")
print(run.status, "in", run.path.name)
for step, facts in run.steps.items():
    print(
        f"{step:>7}: {facts['state']:<9} {facts['duration_s']:.2f} s"
    )

# %%
# The metrics
# -----------
# After a ``foreach``, the evaluation holds one entry per item, named after its values.
for item, metrics in run.metrics["report"].items():
    print(
        item,
        {name: round(value, 4) for name, value in metrics.items()},
    )

# %%
# One bar per ``alpha``, and the seconds each step took. The run directory also holds the
# pictures taskdml draws for every run (``dag.png``, ``training-model.png``, ...) and a
# self-contained ``report.html``.
items = run.metrics["report"]
names = list(items)
fig, (bars, steps) = plt.subplots(
    1, 2, figsize=(9, 3.5), layout="constrained"
)
bars.bar(
    range(len(names)), [items[name]["accuracy"] for name in names]
)
bars.set_xticks(range(len(names)), names)
bars.set_ylim(0.5, 1.0)
bars.set_ylabel("held-out accuracy")
steps.barh(
    list(run.steps),
    [facts["duration_s"] for facts in run.steps.values()],
)
steps.invert_yaxis()
steps.set_xlabel("seconds")
steps.set_title("steps of the run")
print("\n".join(sorted(path.name for path in run.path.iterdir())))
plt.show()

# %%
# The pictures of the run
# -----------------------
# Every run draws its DAG, coloured by the steps' states, and each
# training's curves per epoch (here the three ``foreach`` items, with
# the sync period on the right axis); ``taskdml runs show`` lists
# them, and ``report.html`` holds them all.
for picture in ("dag.png", "training-model.png"):
    image = plt.imread(run.path / picture)
    height = 9 * image.shape[0] / image.shape[1]
    fig, axis = plt.subplots(figsize=(9, height))
    axis.imshow(image)
    axis.set_axis_off()
plt.show()
