"""Adaptive searches on a cluster whose workers change: a worker that joins gets trials (and
a copy of the data for the fused steps), and one that leaves loses nothing."""

import os
import signal
import threading

import numpy as np
import pytest
from distributed import Client, LocalCluster, get_task_stream
from sklearn.datasets import make_classification
from sklearn.linear_model import SGDClassifier

from taskdml.model_selection import ASHASearchCV


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_search_takes_new_workers_and_survives_one_leaving(wait_for):
    """Trials run on a worker that joined mid-search; a worker killed mid-search costs no
    trial: every one finishes with a score."""
    X, y = make_classification(n_samples=60_000, n_features=20, random_state=0)
    space = {"alpha": np.logspace(-6, -1, 24).tolist()}
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        Client(cluster) as client,  # the default client: the search runs in a thread
        get_task_stream(client=client) as stream,
    ):
        first = set(client.nthreads())
        search = ASHASearchCV(
            SGDClassifier(random_state=0), space, n_trials=24, max_epochs=27, random_state=0
        )
        runner = threading.Thread(target=search.fit, args=(X, y))
        runner.start()
        wait_for(lambda: any(client.processing().values()), 60, "the first steps")
        cluster.scale(3)
        client.wait_for_workers(3, timeout=60)
        joined = (set(client.nthreads()) - first).pop()
        leaving = sorted(first)[0]
        os.kill(client.run(os.getpid, workers=[leaving])[leaving], signal.SIGKILL)
        assert runner.is_alive()  # killed mid-search
        runner.join(timeout=240)
        assert not runner.is_alive()
    ran_on = {task["worker"] for task in stream.data if "trial" in str(task["key"])}
    assert joined in ran_on
    assert len(search.trials_) == 24
    assert search.trials_["score"].notna().all()
    assert search.best_score_ > 0.8
