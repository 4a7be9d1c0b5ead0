"""The package imports lazily: a worker that unpickles a task function imports little."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import taskdml
import taskdml.graph
import taskdml.model_selection
import taskdml.parallel
import taskdml.pipeline

ROOT = Path(taskdml.__file__).resolve().parents[1]
PACKAGES = [taskdml, taskdml.model_selection, taskdml.parallel, taskdml.graph]
TASK_MODULES = [
    "taskdml.model_selection.grid._tasks",
    "taskdml.model_selection.adaptive._run",
    "taskdml.parallel.engine._replica",
    "taskdml.runner._values",
    "taskdml.steps.map",
]
# Not needed by any task function; dask itself and pandas (through scikit-learn) are.
HEAVY = ["xarray", "dask.array", "click", "taskdml.metrics", "taskdml.runner._runner"]


def run_python(code):
    """Run *code* in a fresh interpreter that imports this checkout; return its stdout."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_task_modules_do_not_import_heavy_modules():
    """Importing the modules of the task functions imports no xarray, dask.array or click."""
    out = run_python(
        f"import {', '.join(TASK_MODULES)}, json, sys\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    assert json.loads(out) == []


def test_builtin_merge_rules_are_known_without_the_package_names():
    """A process that imports only the registry knows the built-in rules, and a rule
    registered there for a built-in class is not overwritten by them."""
    out = run_python(
        "from sklearn.linear_model import Perceptron, SGDClassifier\n"
        "from taskdml.parallel.merge._registry import get_merge_rule, register_merge\n"
        "register_merge(SGDClassifier, lambda replicas, weights: replicas[0], family='mine')\n"
        "print(get_merge_rule(SGDClassifier()).family, get_merge_rule(Perceptron()).family)"
    )
    assert out.split() == ["mine", "linear-sgd"]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda package: package.__name__)
def test_every_public_name_resolves(package):
    """Every name in ``__all__`` resolves, and ``dir`` lists them all."""
    for name in package.__all__:
        assert getattr(package, name) is not None
    assert set(package.__all__) <= set(dir(package))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda package: package.__name__)
def test_unknown_name_raises_attribute_error(package):
    """A name the package does not have raises AttributeError that names the module."""
    with pytest.raises(AttributeError, match=rf"module '{package.__name__}' has no attribute"):
        package.GridSearchCVV  # noqa: B018


def test_top_level_names_are_the_subpackages_objects():
    """``taskdml.X`` is the same object as the subpackage's, and ``from taskdml import`` works."""
    from taskdml import DataParallel, GridSearchCV, load_pipeline

    assert GridSearchCV is taskdml.model_selection.GridSearchCV
    assert DataParallel is taskdml.parallel.DataParallel
    assert load_pipeline is taskdml.pipeline._spec.load_pipeline
    assert isinstance(taskdml.__version__, str)


DEPRECATED = [
    (taskdml, "Pipeline", "taskdml.PipelineSpec", lambda: taskdml.PipelineSpec),
    (taskdml.pipeline, "Pipeline", "taskdml.pipeline.PipelineSpec", lambda: taskdml.PipelineSpec),
    *[
        (
            taskdml,
            name,
            f"taskdml.parallel.{name}",
            lambda name=name: getattr(taskdml.parallel, name),
        )
        for name in (
            "train",
            "TrainResult",
            "MergeRule",
            "register_merge",
            "register_unmergeable",
            "get_merge_rule",
            "unmergeable_reason",
        )
    ],
]


@pytest.mark.parametrize(
    "package, name, instead, current",
    DEPRECATED,
    ids=[f"{package.__name__}.{name}" for package, name, _, _ in DEPRECATED],
)
def test_a_name_dropped_from_the_api_still_resolves_with_a_warning(package, name, instead, current):
    """Names moved off the top level in 0.2 (extension points to taskdml.parallel, Pipeline
    renamed PipelineSpec) resolve to the same object, with a FutureWarning naming the new
    place; they are no longer in __all__ or dir()."""
    with pytest.warns(FutureWarning, match=rf"{package.__name__}\.{name} is deprecated .* use "):
        value = getattr(package, name)
    assert value is current()
    assert name not in package.__all__ and name not in dir(package)
    with pytest.warns(FutureWarning, match=re.escape(instead)):
        exec(f"from {package.__name__} import {name}", {})


def test_the_top_level_is_for_pipeline_and_estimator_users():
    """taskdml.__all__ holds what pipeline and estimator users need; the extension points are
    in taskdml.parallel (and their checks in taskdml.testing)."""
    for name in ("load_pipeline", "run_pipeline", "PipelineSpec", "DataParallel", "ClassSharded",
                 "FeatureSharded", "ASHASearchCV", "train_federated", "PipelineError"):  # fmt: skip
        assert name in taskdml.__all__
    for name in ("train", "TrainResult", "MergeRule", "register_merge", "Pipeline"):
        assert name not in taskdml.__all__
    assert {"train", "MergeRule", "register_merge"} <= set(taskdml.parallel.__all__)
