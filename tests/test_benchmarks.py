"""The benchmark scripts still run: their smoke runs (``--quick``), which print only."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_scaling_quick_run(tmp_path):
    """benchmarks/scaling.py --quick trains on 1 and 2 workers, streams, measures memory and
    models the speed-up, without touching RESULTS.md."""
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "scaling.py"),
            "--quick",
            "--tmp",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=220,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for section in ("### Speed-up", "### Streaming against persisting", "### Peak memory"):
        assert section in run.stdout
    assert (ROOT / "benchmarks" / "RESULTS.md").read_text() == results


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_model_parallel_quick_run(tmp_path):
    """benchmarks/model_parallel.py --quick trains and predicts a sharded model on 4 workers,
    compares it with the unsharded one, and leaves RESULTS.md alone."""
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "model_parallel.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "### A model larger than one worker" in run.stdout
    assert "equals the unsharded one bit for bit: yes" in run.stdout
    assert (ROOT / "benchmarks" / "RESULTS.md").read_text() == results
