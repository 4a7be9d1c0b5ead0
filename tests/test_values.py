"""Values between steps: a plain callable's result (a Future) or a graph builder's collection
feeds every step that takes data, chunked on the worker that holds it, or is refused with a
message naming both steps."""

import re

import dask.array as da
import numpy as np
import pipeline_functions
import pytest
import xarray as xr
from sklearn.linear_model import SGDClassifier
from sklearn.naive_bayes import GaussianNB

from taskdml import DataError, PipelineSpec, Step, StepFailed, run_pipeline
from taskdml.runner._values import describe

ALLOW = {"allow": ["taskdml.*", "sklearn.*", "pipeline_functions"]}
N = 400


LAZY = ("dask_frame", "dask_arrays", "memory_pandas")  # made by a graph builder


def _producer(kind):
    if kind in LAZY:
        return Step("load", call="pipeline_functions:lazy_values", with_={"kind": kind})
    return Step("load", call="pipeline_functions:classification_values", with_={"kind": kind})


def _prefixes(client):
    return client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes))


@pytest.mark.filterwarnings("ignore:Dask annotations .* detected")  # dask-expr and spans
@pytest.mark.parametrize("kind", ["numpy", "pandas", "pandas_target", "xarray", *LAZY])
def test_a_value_feeds_split_fit_search_and_evaluate(client, kind):
    """callable -> train_test_split -> fit -> evaluate, and callable -> fit, search: each step
    reads the value chunked (about 4 chunks), and the fits equal scikit-learn's in memory."""
    pipeline = PipelineSpec(
        f"values_{kind}",
        [
            _producer(kind),
            Step(
                "split",
                call="taskdml.datasets:train_test_split",
                inputs={"data": "load"},
                with_={"random_state": 0},
                outputs=["train", "test"],
            ),
            Step("model", fit="sklearn.naive_bayes:GaussianNB", inputs={"data": "split.train"}),
            Step("report", evaluate=["accuracy"], inputs={"model": "model", "data": "split.test"}),
            Step("whole", fit="sklearn.naive_bayes:GaussianNB", inputs={"data": "load"}),
            Step(
                "tune",
                search="sklearn.linear_model:SGDClassifier",
                method="grid",
                space={"alpha": [1e-3, 1e-1]},
                with_={"random_state": 0},
                cv=2,
                parallel={"random_state": 0},
                inputs={"data": "load"},
            ),
        ],
        imports=ALLOW,
    )
    run = run_pipeline(pipeline, client, record=False)
    X, y = pipeline_functions.classification_arrays(N)
    whole = run.outputs["whole"]["model"]
    np.testing.assert_allclose(whole.theta_, GaussianNB().fit(X, y).theta_, rtol=1e-12)
    assert isinstance(run.outputs["tune"]["best_model"], SGDClassifier)

    train, test = (run.outputs["split"][side].compute() for side in ("train", "test"))
    assert train.sizes["sample"] + test.sizes["sample"] == N
    assert len(run.outputs["split"]["train"].X.chunks[0]) == 4
    reference = GaussianNB().fit(train.X.values, train.y.values)
    np.testing.assert_allclose(run.outputs["model"]["model"].theta_, reference.theta_, rtol=1e-12)
    assert run.metrics["report"]["accuracy"] == pytest.approx(
        reference.score(test.X.values, test.y.values)
    )
    if kind not in LAZY[:2]:  # a Future or a scattered value: sliced by the consumers' tasks
        assert {"split-chunk", "whole-chunk", "tune-chunk"} <= set(_prefixes(client))


def test_x_only_array_feeds_an_unsupervised_fit(client):
    """A callable returning one 2-D array gives X without y: a scaler fits it exactly."""
    pipeline = PipelineSpec(
        "x_only",
        [
            _producer("numpy_X"),
            Step("scale", fit="sklearn.preprocessing:StandardScaler", inputs={"data": "load"}),
        ],
        imports=ALLOW,
    )
    scaler = run_pipeline(pipeline, client, record=False).outputs["scale"]["model"]
    X, _ = pipeline_functions.classification_arrays(N)
    np.testing.assert_allclose(scaler.mean_, X.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(scaler.scale_, X.std(axis=0), rtol=1e-12)


def test_a_table_becomes_one_variable_per_column(client):
    """A DataFrame with a string column becomes the table form (one variable per column along
    sample, target y); a map step encodes it and a fit reads the result. Fitting the table
    directly fails with the engine's message naming the columns to encode."""
    pipeline = PipelineSpec(
        "table",
        [
            _producer("table"),
            Step("encode", map="pipeline_functions:table_rows", inputs={"data": "load"}),
            Step("model", fit="sklearn.naive_bayes:GaussianNB", inputs={"data": "encode"}),
            Step("direct", fit="sklearn.naive_bayes:GaussianNB", inputs={"data": "load"}),
        ],
        imports=ALLOW,
    )
    with pytest.raises(
        StepFailed, match=r"step 'direct' failed: the columns \['city'\] are not numeric"
    ):
        run_pipeline(pipeline, client, record=False)
    frame = pipeline_functions.classification_values("table")
    plan = describe(frame)
    assert [v[0] for v in plan["variables"]] == ["f0", "f1", "f2", "f3", "city", "y"]
    pipeline = PipelineSpec(
        "table_ok", [s for s in pipeline.steps if s.name != "direct"], imports=ALLOW
    )
    run = run_pipeline(pipeline, client, record=False)
    X = np.stack([frame.city.str.len().to_numpy(float), frame.f1.to_numpy()], 1)
    reference = GaussianNB().fit(X, frame.y.to_numpy())
    np.testing.assert_allclose(run.outputs["model"]["model"].theta_, reference.theta_, rtol=1e-12)


CONSUMERS = {
    "fit": Step("consumer", fit="sklearn.naive_bayes:GaussianNB", inputs={"data": "load"}),
    "call": Step("consumer", call="taskdml.datasets:train_test_split", inputs={"data": "load"}),
    "evaluate": Step("consumer", evaluate=["accuracy"], inputs={"model": "load", "data": "load"}),
    "map": Step("consumer", map="pipeline_functions:add_squares", inputs={"data": "load"}),
    "search": Step(
        "consumer",
        search="sklearn.linear_model:SGDClassifier",
        method="grid",
        space={"alpha": [0.1]},
        inputs={"data": "load"},
    ),
}


@pytest.mark.parametrize("kind", list(CONSUMERS))
def test_a_value_that_is_not_data_names_both_steps(client, kind):
    """A callable returning a str, read as data: every kind refuses it with one message that
    names the consumer and its kind, the producer, the value's type, the types accepted and
    the fix."""
    pipeline = PipelineSpec(
        "mismatch",
        [Step("load", call="pipeline_functions:text"), CONSUMERS[kind]],
        imports=ALLOW,
    )
    with pytest.raises(StepFailed) as info:
        run_pipeline(pipeline, client, record=False)
    assert str(info.value) == (
        f"step 'consumer' failed: step 'consumer' ({kind}) cannot read input 'data' from step "
        f"'load': 'load' gave a Future of str (builtins.str), but a {kind} step needs data: "
        "an xarray.Dataset along 'sample' (X dims sample, feature and y dims sample, or a "
        "table), a 2-D NumPy or dask array, a tuple (X, y), a pandas or dask DataFrame "
        "(target: the column attrs['target'] or 'y'), or a Future of one of these. Make step "
        "'load' return one of these."
    )


@pytest.mark.parametrize(
    "value, found",
    [
        (np.arange(5.0), "a NumPy array of shape (5,) and dtype float64"),
        ((np.zeros((3, 2)), np.zeros(4)), "a tuple (X, y) with X of 3 rows and y of shape (4,)"),
        ((1, 2, 3), "a tuple of 3 values"),
        ({"a": 1}, "the 1 items of a foreach step (a dict)"),
        (da.zeros(5, chunks=2), "a lazy Array of shape (5,)"),
        (xr.Dataset({"X": (("row", "col"), np.zeros((2, 2)))}), "an xarray.Dataset with dims"),
    ],
)
def test_in_memory_values_are_refused_with_the_reason(client, value, found):
    """Values in the client are checked the same way; the message says what was found."""
    from taskdml.runner._values import as_dataset

    with pytest.raises(DataError, match=re.escape(f"'load' gave {found}")):
        as_dataset(value, client=client, producer="load", consumer=("model", "fit"))
