"""The guides in docs/guides: every worked example runs and prints what its page says, and
every file a page includes exists."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ROOT / "docs" / "guides"
EXAMPLES = GUIDES / "examples"
TIMEOUT_S = 90

# script -> patterns its output must match, in order (each on its own line)
EXPECTED = {
    "migrate_dask_ml.py": [
        r"^DataParallel: strategy=sync replicas=2 epochs=5 test accuracy=0\.(8[5-9]|9)\d*$",
        r"^HyperbandSearchCV: 17 trials, best validation score=0\.\d+, "
        r"test accuracy=0\.(8[5-9]|9)\d*$",
        r"^ASHASearchCV: 12 trials \{'completed': 1, .*'stopped at rung 0': \d+.*\}, "
        r"best alpha=.+, test accuracy=0\.(8[5-9]|9)\d*$",
    ],
    "migrate_sklearn.py": [
        r"^GridSearchCV: best \{'sgdclassifier__alpha': .+\}, cv accuracy=0\.9\d*, "
        r"same scores as scikit-learn: True$",
        r"^DataParallel: 2 replicas, test accuracy=0\.(8[5-9]|9)\d*$",
        r"^pipeline sweep\[alpha=0\.0001\]: test accuracy=0\.9\d*$",
        r"^pipeline sweep\[alpha=0\.001\]: test accuracy=0\.9\d*$",
        r"^pipeline sweep\[alpha=0\.01\]: test accuracy=0\.9\d*$",
    ],
    "migrate_spark.py": [
        r"^run succeeded: 6 candidates, 3 folds each$",
        r"^best parameters: \{'alpha': .+, 'penalty': '(l2|elasticnet)'\}$",
        r"^held-out roc_auc: 0\.(8|9)\d*$",
        r"^held-out accuracy: 0\.(7|8|9)\d*$",
    ],
    "migrate_kedro_hydra.py": [
        r"^run succeeded: steps customers, features, split, scale, model, report$",
        r"^model\[alpha=0\.0001\]: accuracy=0\.(7|8|9)\d*, roc_auc=0\.(8|9)\d*$",
        r"^model\[alpha=0\.1\]: accuracy=0\.(7|8|9)\d*, roc_auc=0\.(8|9)\d*$",
        r"^best item: model\[alpha=.+\]$",
    ],
}

INCLUDE = re.compile(r"^```\{literalinclude\}\s+(\S+)", re.MULTILINE)
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)
# A cluster block shown alone is checked inside this pipeline.
WRAPPER = """taskdml: 1
name: snippet
steps:
  data: {call: taskdml.datasets:load_sklearn, with: {name: iris}}
"""


def test_every_example_is_checked():
    """Each script in docs/guides/examples has expected output here."""
    scripts = {path.name for path in EXAMPLES.glob("migrate_*.py")}
    assert scripts == set(EXPECTED)


def test_included_files_exist():
    """Every {literalinclude} path in docs/guides/*.md names a file, and every example is shown."""
    included = set()
    for page in sorted(GUIDES.glob("*.md")):
        for target in INCLUDE.findall(page.read_text()):
            path = (page.parent / target).resolve()
            assert path.is_file(), f"{page.name}: {{literalinclude}} {target} does not exist"
            included.add(path)
    examples = {path.resolve() for path in EXAMPLES.iterdir() if path.suffix in (".py", ".yaml")}
    assert examples <= included, f"not shown in any page: {sorted(examples - included)}"


def test_pipeline_snippets_are_valid():
    """Every YAML block of the guides that is a pipeline file, or a cluster block, validates."""
    import taskdml

    checked = 0
    for page in sorted(GUIDES.glob("*.md")):
        for number, block in enumerate(YAML_BLOCK.findall(page.read_text()), start=1):
            if block.startswith("taskdml:"):
                text = block
            elif block.startswith("cluster:"):
                text = WRAPPER + block
            else:
                continue  # a fragment (one step) or another tool's file
            taskdml.loads_pipeline(text, source=f"{page.name}, YAML block {number}")
            checked += 1
    assert checked >= 7


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_worked_example_runs(script, tmp_path):
    """The script runs from any directory on its embedded cluster and prints its results;
    migrate_sklearn's grid search prints the best parameters and cross-validated accuracy of
    scikit-learn's GridSearchCV run here on the same rows."""
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    position = 0
    for pattern in EXPECTED[script]:
        while position < len(lines) and not re.search(pattern, lines[position]):
            position += 1
        assert position < len(lines), f"no line matches {pattern!r} in order:\n{done.stdout}"
        position += 1
    assert not list(tmp_path.iterdir()), "the example left files in the working directory"
    if script == "migrate_sklearn.py":
        (grid_line,) = [line for line in lines if line.startswith("GridSearchCV:")]
        printed = re.search(r"best (\{.*\}), cv accuracy=(\S+),", grid_line)
        reference = _sklearn_grid_search()
        assert ast.literal_eval(printed[1]) == reference.best_params_
        assert float(printed[2]) == pytest.approx(reference.best_score_, abs=5e-4)


def _sklearn_grid_search():
    """migrate_sklearn.py's search as scikit-learn's own GridSearchCV: the same pipeline, grid
    and folds on the first 1400 rows of digits, fitted in this process."""
    from sklearn.datasets import load_digits
    from sklearn.linear_model import SGDClassifier
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = load_digits(return_X_y=True)
    pipe = make_pipeline(StandardScaler(), SGDClassifier(random_state=0))
    grid = {"sgdclassifier__alpha": [1e-4, 1e-3, 1e-2], "sgdclassifier__penalty": ["l2", "l1"]}
    return GridSearchCV(pipe, grid, cv=3).fit(X[:1400], y[:1400])
