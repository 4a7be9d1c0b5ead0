"""``map:`` steps: a user function over every chunk, where the chunk lives, on a real cluster."""

import numpy as np
import pytest
from sklearn.naive_bayes import GaussianNB
from sklearn.preprocessing import StandardScaler

from taskdml import PipelineError, PipelineSpec, Step, StepFailed, loads_pipeline, run_pipeline
from taskdml.datasets import make_classification

ALLOW = {"allow": ["taskdml.*", "sklearn.*", "pipeline_functions"]}
DATA = {
    "n_samples": 1000,
    "n_features": 3,
    "n_informative": 2,
    "n_redundant": 0,
    "chunk_size": 250,
    "random_state": 0,
}


def _pipeline(name, map_step):
    """make_classification (a graph builder) -> *map_step* -> fit -> evaluate."""
    return PipelineSpec(
        name,
        [
            Step("data", call="taskdml.datasets:make_classification", with_=DATA),
            map_step,
            Step("model", fit="sklearn.naive_bayes:GaussianNB", inputs={"data": map_step.name}),
            Step(
                "report",
                evaluate=["accuracy"],
                inputs={"model": "model", "data": map_step.name},
            ),
        ],
        imports=ALLOW,
    )


def _expected(scale):
    data = make_classification(**DATA).compute()
    X = data.X.values
    return np.hstack([X, X**2 * scale]), data.y.values


@pytest.mark.parametrize("features", [None, 6, ["a", "b", "c", "d", "e", "f"]])
def test_map_applies_the_function_chunk_by_chunk(client, features):
    """Every chunk is transformed in its own task named after the step; the output keeps the
    input's chunks, equals the function applied to the whole, and a fit and an evaluate read
    it. Its width is found from chunk 0, or declared with 'features'."""
    name = "squares" if features is None else ("declared" if features == 6 else "named")
    step = Step(
        name,
        map="pipeline_functions:add_squares",
        with_={"scale": 0.5},
        features=features,
        inputs={"data": "data"},
    )
    run = run_pipeline(_pipeline(f"map_{name}", step), client, record=False)
    out = run.outputs[name]["data"]
    assert out.X.chunks == ((250,) * 4, (6,)) and out.y.chunks == ((250,) * 4,)
    X, y = _expected(0.5)
    np.testing.assert_allclose(out.X.values, X, rtol=1e-12)
    np.testing.assert_array_equal(out.y.values, y)
    if isinstance(features, list):
        assert out.feature.values.tolist() == features
    reference = GaussianNB().fit(X, y)
    np.testing.assert_allclose(run.outputs["model"]["model"].theta_, reference.theta_, rtol=1e-12)
    assert run.metrics["report"]["accuracy"] == pytest.approx(reference.score(X, y))
    prefixes = set(
        client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes))
    )
    assert {name, f"{name}-output"} <= prefixes
    assert (f"{name}-schema" in prefixes) == (features is None)


def test_map_foreach_gives_one_dataset_per_item(client):
    """foreach runs the map once per item, each with its own keyword arguments."""
    step = Step(
        "fan",
        map="pipeline_functions:add_squares",
        foreach={"scale": [1.0, 2.0]},
        inputs={"data": "data"},
    )
    pipeline = PipelineSpec("map_fan", [_pipeline("x", step).steps[0], step], imports=ALLOW)
    outputs = run_pipeline(pipeline, client, record=False).outputs["fan"]["data"]
    assert list(outputs) == ["scale=1.0", "scale=2.0"]
    for label, scale in (("scale=1.0", 1.0), ("scale=2.0", 2.0)):
        np.testing.assert_allclose(outputs[label].X.values, _expected(scale)[0], rtol=1e-12)


@pytest.mark.parametrize(
    "function, settings, message",
    [
        (
            "fail_at_row",
            {"with_": {"row": 600}},
            "step 'bad' failed: 'pipeline_functions:fail_at_row' failed on chunk 2 "
            "(samples 500..749): ValueError: cannot handle row 600",
        ),
        (
            "fail_at_row",
            {"with_": {"row": 0}},
            "step 'bad' failed: 'pipeline_functions:fail_at_row' failed on chunk 0 "
            "(samples 0..249): ValueError: cannot handle row 0",
        ),
        (
            "text_chunk",
            {},
            "step 'bad' failed: 'pipeline_functions:text_chunk' failed on chunk 0 "
            "(samples 0..249): it returned str; a map function returns an xarray.Dataset with "
            "the chunk's 250 rows along 'sample', or a tuple (X, y) of them (X may be a "
            "scipy.sparse matrix).",
        ),
        (
            "add_squares",
            {"features": 5},
            "step 'bad' failed: 'pipeline_functions:add_squares' failed on chunk 0 "
            "(samples 0..249): its 'X' has shape (250, 8); expected (rows, 5) as in chunk 0 "
            "(or 'features').",
        ),
    ],
)
def test_a_failing_chunk_names_its_index_and_rows(client, function, settings, message):
    """A function that raises on one chunk, returns no Dataset, or returns a chunk unlike the
    declared features fails the step; the message names the chunk, its sample range and the
    original error."""
    pipeline = PipelineSpec(
        "map_fails",
        [
            Step(
                "data",
                call="pipeline_functions:classification_arrays",
                with_={"n_samples": 1000},
            ),
            Step(
                "bad",
                map=f"pipeline_functions:{function}",
                inputs={"data": "data"},
                **settings,
            ),
        ],
        imports=ALLOW,
    )
    with pytest.raises(StepFailed) as info:
        run_pipeline(pipeline, client, record=False)
    assert str(info.value) == message


MAP_FILE = """\
taskdml: 1
name: mapped
imports: {allow: [taskdml.*, pipeline_functions]}
steps:
  data:
    call: taskdml.datasets:load_sklearn
    with: {name: iris}
  squares:
    map: pipeline_functions:add_squares
    with: {scale: 2.0}
    inputs: {data: data}
"""


@pytest.mark.parametrize(
    "old, new, fragment",
    [
        (
            "    with: {scale: 2.0}",
            "    with: {scale: 2.0}\n    method: grid",
            "<string>:11:5: steps.squares.method: key 'method' does not apply to a 'map' "
            "step; it belongs to 'search' steps.",
        ),
        (
            "    with: {scale: 2.0}",
            "    with: {scal: 2.0}",
            "<string>:10:12: steps.squares.with.scal: 'pipeline_functions:add_squares' takes "
            "no argument 'scal'. Did you mean 'scale'?",
        ),
        (
            "    with: {scale: 2.0}",
            "    features: [1, 2]",
            "<string>:10:5: steps.squares.features: expected an integer >= 1 or a list of "
            "feature names, found [1, 2].",
        ),
        (
            "    inputs: {data: data}",
            "    inputs: {chunk: data}",
            "steps.squares.inputs: a 'map' step needs input 'data'",
        ),
        (
            "pipeline_functions:add_squares",
            "pipeline_functions:text",
            "steps.squares.map: 'pipeline_functions:text' takes no positional argument: a "
            "map function receives each chunk first",
        ),
        (
            "    with: {name: iris}",
            "    with: {name: iris}\n    features: 3",
            "<string>:8:5: steps.data.features: key 'features' does not apply to a 'call' "
            "step; it belongs to 'map' steps.",
        ),
    ],
)
def test_map_steps_are_validated_with_the_file(old, new, fragment):
    """Keys, arguments, inputs and the function of a map step are checked when the file is
    loaded, each problem at its line and column."""
    with pytest.raises(PipelineError) as info:
        loads_pipeline(MAP_FILE.replace(old, new))
    assert fragment in str(info.value), str(info.value)


def test_other_inputs_reach_every_chunk(client):
    """Inputs besides data are keyword arguments of every call: a fit step's model and a plain
    callable's Future (resolved on the workers); the output is scikit-learn's scaler, fitted
    in memory, applied to the data, plus the offset."""
    pipeline = PipelineSpec(
        "map_inputs",
        [
            Step("data", call="taskdml.datasets:make_classification", with_=DATA),
            Step("scale", fit="sklearn.preprocessing:StandardScaler", inputs={"data": "data"}),
            Step("offset", call="pipeline_functions:add", with_={"a": 1.0, "b": 2.0}),
            Step(
                "scaled",
                map="pipeline_functions:transform_chunk",
                inputs={"data": "data", "model": "scale", "offset": "offset"},
            ),
        ],
        imports=ALLOW,
    )
    run = run_pipeline(pipeline, client, record=False)
    X = make_classification(**DATA).X.values
    reference = StandardScaler().fit(X)  # scikit-learn's, in memory
    np.testing.assert_allclose(run.outputs["scale"]["model"].mean_, reference.mean_, rtol=1e-10)
    expected = reference.transform(X) + 3.0
    np.testing.assert_allclose(run.outputs["scaled"]["data"].X.values, expected, atol=1e-10)


def test_a_map_step_round_trips_through_the_file_format():
    """dump_pipeline writes a map step kind first, and loads back equal, features included."""
    from taskdml import dump_pipeline

    pipeline = loads_pipeline(MAP_FILE.replace("    with: {scale: 2.0}", "    features: [a, b]"))
    text = dump_pipeline(pipeline)
    assert "  squares:\n    map: pipeline_functions:add_squares\n" in text
    assert loads_pipeline(text) == pipeline
    assert loads_pipeline(text).step("squares").features == ("a", "b")
