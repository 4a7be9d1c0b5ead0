"""From Kedro and Hydra to taskdml: migrate_kedro_hydra.yaml with command-line overrides.

Run it with ``python docs/guides/examples/migrate_kedro_hydra.py``. It loads the pipeline
file with two overrides written as on the command line (``taskdml run FILE seed=1
alphas=[...]``), runs it on an embedded two-worker cluster (the file's ``cluster`` block;
the project's module ``churn_nodes`` is shipped to the workers) without recording a run
directory (``record=False``; ``taskdml run`` records one), and prints each item of the sweep
with its metrics.
"""

from pathlib import Path

import taskdml

HERE = Path(__file__).resolve().parent

# Hydra: python train.py -m seed=1 model.alpha=1e-4,1e-3,1e-2,1e-1
OVERRIDES = ["seed=1", "alphas=[1.0e-4,1.0e-3,1.0e-2,1.0e-1]"]


def main():
    pipeline = taskdml.load_pipeline(HERE / "migrate_kedro_hydra.yaml", overrides=OVERRIDES)
    run = taskdml.run_pipeline(pipeline, record=False)
    print(f"run {run.status}: steps {', '.join(run.steps)}")
    for item, metrics in run.metrics["report"].items():
        scores = ", ".join(f"{name}={value:.3f}" for name, value in metrics.items())
        print(f"model[{item}]: {scores}")
    best = max(run.metrics["report"], key=lambda item: run.metrics["report"][item]["accuracy"])
    print(f"best item: model[{best}]")


if __name__ == "__main__":
    main()
