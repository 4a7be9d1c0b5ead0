"""From Spark MLlib to taskdml: the pipeline file migrate_spark.yaml on a folder of Parquet files.

Run it with ``python docs/guides/examples/migrate_spark.py``. It writes a small table as
four Parquet part files (what Spark's ``df.write.parquet`` leaves) into a temporary folder,
runs the pipeline on an embedded two-worker cluster (the file's ``cluster`` block), prints the
best parameters and the held-out metrics, and removes the folder.
"""

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

import taskdml

HERE = Path(__file__).resolve().parent


def write_customers(folder, n_rows=8_000, n_files=4, seed=0):
    """A churn table as Parquet part files: four numeric columns and the 0/1 label ``churned``."""
    rng = np.random.default_rng(seed)
    table = pd.DataFrame(
        {
            "tenure": rng.integers(1, 72, n_rows).astype(float),
            "monthly_charges": rng.normal(70.0, 20.0, n_rows),
            "support_calls": rng.poisson(2.0, n_rows).astype(float),
            "usage_gb": rng.gamma(2.0, 10.0, n_rows),
        }
    )
    risk = (
        -0.05 * table["tenure"]
        + 0.03 * table["monthly_charges"]
        + 0.5 * table["support_calls"]
        - 2.0
        + rng.normal(0.0, 1.0, n_rows)
    )
    table["churned"] = (risk > 0).astype(int)
    folder.mkdir(parents=True)
    for part, rows in enumerate(np.array_split(np.arange(n_rows), n_files)):
        table.iloc[rows].to_parquet(folder / f"part-{part:05d}.parquet", index=False)
    return folder


def main():
    with tempfile.TemporaryDirectory() as tmp:
        path = write_customers(Path(tmp) / "customers")
        # The same override works on the command line: taskdml run migrate_spark.yaml path=...
        pipeline = taskdml.load_pipeline(HERE / "migrate_spark.yaml", overrides=[f"path={path}"])
        run = taskdml.run_pipeline(pipeline, run_root=Path(tmp) / "runs")
        trials = pd.read_csv(run.path / "trials-tune.csv")
        print(f"run {run.status}: {len(trials)} candidates, 3 folds each")
        print(trials[["alpha", "penalty", "score", "rank"]].to_string(index=False))
        print(f"best parameters: {run.steps['tune']['summary']['best_params']}")
        for metric, value in run.metrics["report"].items():
            print(f"held-out {metric}: {value:.3f}")


if __name__ == "__main__":
    main()
