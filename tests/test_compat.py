"""Private scikit-learn, dask and distributed names live in ``taskdml/_compat.py`` only, and
taskdml works with the oldest releases ``pyproject.toml`` allows.

:func:`private_uses` reads every module of ``taskdml`` and ``cli`` with :mod:`ast`, without
importing them, and reports, outside ``taskdml/_compat.py``:

- ``import``: an import of an upstream (``sklearn``, ``dask``, ``distributed``) module with a
  ``_`` part, of a name starting with ``_``, or of one of distributed's internal modules
  (:data:`INTERNAL_MODULES`: public-looking names, no public API);
- ``module``: ``mod._x`` where ``mod`` was bound by importing an upstream module;
- ``distributed``: a known private member (:data:`DISTRIBUTED_PRIVATE`) read on a receiver whose
  name ends in ``client``, ``worker`` or ``scheduler`` (``dask_worker.plugins``,
  ``self.client.futures``), and ``Status.dont_reply`` anywhere;
- ``dask``: a dask collection's ``_meta`` or ``_name`` read on anything but ``self``/``cls``;
- ``method``: a call ``obj._x(...)`` on anything but ``self``, ``cls``, ``super()`` or a
  module taskdml or the standard library binds (``_tabular._dense(...)``). In the merge rules
  (``taskdml/parallel/merge/``), whose objects are scikit-learn estimators, every such call;
  elsewhere only those of a name no ``def`` in taskdml has (``search._value(name)`` is a
  taskdml search's). namedtuple's ``_replace``/``_asdict``/``_make`` are public;
- ``known``: a private name known to be an upstream object's (:data:`UPSTREAM_PRIVATE_NAMES`)
  read on anything but ``self``/``cls`` (``validate = estimator._validate_params``), or
  named in ``getattr``/``hasattr``/``setattr``.

What it cannot see, and review has to: a private method an upstream base class gives
``self`` (why ``_compat.init_callback_context(self)`` exists), an unknown private method read
without a call, names built at run time, and objects passed under other names. The learned
private attributes a merge rule reads and writes (``km._counts``) are state, not API; those
a merge function assigns must be in some rule's ``private_state``
(:func:`test_merged_private_attributes_are_declared`).

:func:`test_floor_versions_work` installs the floors of ``pyproject.toml`` (scikit-learn,
dask, distributed; ``pip install --no-deps --target``) and runs taskdml on them in a
subprocess: every module imports, and DataParallel and GridSearchCV fit on in-memory data.
The floor is scikit-learn 1.6 because the compat module absorbs what came later
(``sklearn.callback`` is 1.9's: a search has ``set_callbacks`` only there).
"""

import ast
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]  # the checkout: pyproject.toml, taskdml/, cli/
COMPAT = Path("taskdml") / "_compat.py"
UPSTREAM = ("sklearn", "dask", "distributed")
INTERNAL_MODULES = (
    "distributed.batched",
    "distributed.comm",
    "distributed.core",
    "distributed.protocol",
    "distributed.utils_comm",
    "distributed.worker_state_machine",
)
DISTRIBUTED_PRIVATE = {
    "batched_stream",
    "blocked_handlers",
    "connection_args",
    "futures",
    "handlers",
    "http_application",
    "plugins",
    "register_worker_plugin",
    "rpc",
    "scheduler",  # client.scheduler, the rpc to it
    "state",
    "stream_handlers",
    "tasks",
    "workers",
}
RECEIVER = re.compile(r"(client|worker|scheduler)$")
DASK_PRIVATE = {"_meta", "_name"}
PUBLIC_UNDERSCORE = {"_replace", "_asdict", "_make", "_fields"}  # namedtuple's API
UPSTREAM_PRIVATE_NAMES = {
    "_accept_sample_weight",
    "_init_callback_context",
    "_skl_callbacks",
    "_validate_params",
}


def _receiver_name(node):
    """The last name of an attribute's receiver: ``self.client`` -> ``client``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_private(name):
    return name.startswith("_") and not name.startswith("__")


def _upstream(module):
    return module is not None and module.split(".")[0] in UPSTREAM


def _private_import(module, names=()):
    if not _upstream(module):
        return False
    internal = any(module == m or module.startswith(m + ".") for m in INTERNAL_MODULES)
    return internal or any(map(_is_private, module.split("."))) or any(map(_is_private, names))


def _bound_modules(tree):
    """``{local name: module}`` of every ``import`` and ``from ... import`` in *tree*."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def scan(source, path="<planted>", own=frozenset(), strict=False):
    """``[(path, line, kind, code)]``: the private upstream uses in *source* (see the module).

    *own*: the private names taskdml defines, whose calls pass unless *strict* (a merge rule).
    """
    tree = ast.parse(source)
    bound = _bound_modules(tree)
    found = []

    def report(node, kind):
        found.append((str(path), node.lineno, kind, ast.unparse(node)[:80]))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            if any(_private_import(alias.name) for alias in node.names):
                report(node, "import")
        elif isinstance(node, ast.ImportFrom):
            if _private_import(node.module, [a.name for a in node.names]):
                report(node, "import")
        elif isinstance(node, ast.Attribute):
            receiver = _receiver_name(node.value)
            if node.attr == "dont_reply" and receiver == "Status":
                report(node, "distributed")
            elif node.attr in DISTRIBUTED_PRIVATE and receiver and RECEIVER.search(receiver):
                report(node, "distributed")
            elif node.attr in DASK_PRIVATE and receiver not in ("self", "cls"):
                report(node, "dask")
            elif node.attr in UPSTREAM_PRIVATE_NAMES and receiver not in ("self", "cls"):
                report(node, "known")
            elif (
                _is_private(node.attr)
                and isinstance(node.value, ast.Name)
                and _upstream(bound.get(node.value.id))
            ):
                report(node, "module")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and _is_private(func.attr):
                receiver = func.value
                if func.attr in PUBLIC_UNDERSCORE | DASK_PRIVATE | UPSTREAM_PRIVATE_NAMES:
                    continue  # public, or reported as an attribute
                if func.attr in own and not strict:
                    continue
                if isinstance(receiver, ast.Name) and (
                    receiver.id in ("self", "cls")
                    or (receiver.id in bound and not _upstream(bound[receiver.id]))
                ):
                    continue
                if isinstance(receiver, ast.Call) and getattr(receiver.func, "id", "") == "super":
                    continue
                if isinstance(receiver, ast.Name) and _upstream(bound.get(receiver.id)):
                    continue  # reported as "module"
                report(node, "method")
            elif (
                isinstance(func, ast.Name)
                and func.id in ("getattr", "hasattr", "setattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in UPSTREAM_PRIVATE_NAMES
            ):
                report(node, "known")
    return found


def private_uses(root=ROOT):
    """:func:`scan` of every module of ``taskdml`` and ``cli`` but the compat module."""
    sources = {
        path.relative_to(root): path.read_text(encoding="utf-8")
        for package in ("taskdml", "cli")
        for path in sorted((root / package).rglob("*.py"))
    }
    own = {
        node.name
        for source in sources.values()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_private(node.name)
    }
    merge_rules = Path("taskdml", "parallel", "merge")
    found = []
    for path, source in sources.items():
        if path != COMPAT:
            found += scan(source, path, own, strict=merge_rules in path.parents)
    return found


def test_the_package_uses_private_upstream_names_only_through_compat():
    """No module but ``taskdml/_compat.py`` imports or calls a private upstream name."""
    found = private_uses()
    assert not found, "route these through taskdml/_compat.py:\n" + "\n".join(
        f"{path}:{line}: [{kind}] {code}" for path, line, kind, code in found
    )


OWN = "class Search:\n    def _check_params(self):\n        pass\n"  # taskdml's own private method
PLANTED = [
    ("from sklearn.utils import _safe_indexing", "import"),
    ("from sklearn.utils._indexing import resample", "import"),
    ("import dask._task_spec", "import"),
    ("from distributed.comm import connect", "import"),
    ("from distributed.core import Status", "import"),
    ("import sklearn.utils as u\nu._safe_indexing([1], [0])", "module"),
    ("from sklearn import multiclass\nmulticlass._predict_binary(e, X)", "module"),
    ("def setup(worker):\n    worker.handlers['x'] = f", "distributed"),
    ("def f(dask_worker):\n    return dask_worker.plugins['warm']", "distributed"),
    ("def f(self):\n    return self.client.futures", "distributed"),
    ("def f(dask_scheduler):\n    return 'x' in dask_scheduler.plugins", "distributed"),
    ("def f(client):\n    return client.scheduler.address", "distributed"),
    ("def receive(Status):\n    return Status.dont_reply", "distributed"),
    ("meta = frame._meta.copy()", "dask"),
    ("key = frame._name", "dask"),
    ("def merge(merged):\n    alpha = merged._check_alpha()", "method"),
    ("def prepare(km, X):\n    km._init_centroids(X)", "method"),
    ("def prepare(nmf, X):\n    nmf._check_params(X)", "method"),  # a merge rule: strict
    ("bool(getattr(search, '_skl_callbacks', None))", "known"),
    ("def check(estimator):\n    validate = estimator._validate_params", "known"),
    ("def check(scorer):\n    return scorer._accept_sample_weight()", "known"),
]


@pytest.mark.parametrize(("source", "kind"), PLANTED, ids=[kind for _, kind in PLANTED])
@pytest.mark.parametrize("folder", ["taskdml", "taskdml/parallel/merge"])
def test_scan_finds_a_planted_use(tmp_path, source, kind, folder):
    """Each kind of private upstream use, planted in a module of a copy of the package's
    layout (beside a class of its own with private methods), is found, once."""
    package = tmp_path / folder
    package.mkdir(parents=True)
    (tmp_path / "taskdml" / "_own.py").write_text(OWN, encoding="utf-8")
    (tmp_path / "taskdml" / "_compat.py").write_text(source + "\n", encoding="utf-8")  # exempt
    (package / "planted.py").write_text(source + "\n", encoding="utf-8")
    found = [(path, kind) for path, _, kind, _ in private_uses(tmp_path)]
    if "_check_params" in source and folder == "taskdml":
        assert found == []  # taskdml defines _check_params: a call outside the merge rules passes
    else:
        assert found == [(str(Path(folder) / "planted.py"), kind)]


@pytest.mark.parametrize(
    "source",
    [
        "from sklearn.utils import check_array\nfrom distributed import get_worker",
        "from taskdml._compat import _safe_indexing",
        "def f(self):\n    return self._meta, self._check()",
        "def f(point):\n    return point._replace(x=1)",
        "import sys\nsys._getframe(1)",
        "from taskdml.parallel.chunkwise import _tabular\n_tabular._dense(1, 2)",
        "class A(B):\n    def f(self):\n        return super()._g()",
        "def f(client):\n    return client.scheduler_info(), client.submit(len, [])",
    ],
)
def test_scan_passes_public_and_own_names(source):
    """Public upstream names, the compat module's and taskdml's own private names pass."""
    assert scan(source) == []


def test_compat_names_resolve():
    """Every name of the compat module resolves with the installed releases."""
    from taskdml import _compat

    for name in _compat.__all__:
        assert getattr(_compat, name) is not None, name
    assert _compat.CallbackSupportMixin.__module__.startswith(("sklearn", "taskdml"))


def test_merged_private_attributes_are_declared():
    """A private attribute a merge function assigns is in some rule's ``private_state``."""
    from taskdml.parallel.merge._registry import RULES, MergeRule

    declared = {
        name
        for _, rule in RULES.items()
        if isinstance(rule, MergeRule)
        for name in rule.private_state
    }
    assigned = set()
    for path in (ROOT / "taskdml" / "parallel" / "merge").glob("*.py"):
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(function, ast.FunctionDef) and "merge" in function.name:
                for node in ast.walk(function):
                    if isinstance(node, ast.Assign):
                        assigned |= {
                            (path.name, t.attr)
                            for t in node.targets
                            if isinstance(t, ast.Attribute)
                            and _is_private(t.attr)
                            and not t.attr.startswith("_taskdml")
                            and _receiver_name(t.value) not in ("self", "cls")
                        }
    assert assigned, "the scan found no merge function"
    assert {(file, name) for file, name in assigned if name not in declared} == set()


# ------------------------------------------------------------------------------------------
# The floor: the oldest releases pyproject.toml allows, installed beside this checkout.

FLOOR_PACKAGES = ("scikit-learn", "dask", "distributed")

SMOKE = textwrap.dedent(
    """
    import importlib, importlib.util, json, pkgutil, sys, warnings
    import numpy as np
    import dask, distributed, sklearn
    from sklearn.datasets import make_classification
    from sklearn.linear_model import SGDClassifier
    import taskdml

    print(json.dumps({"scikit-learn": sklearn.__version__, "dask": dask.__version__,
                      "distributed": distributed.__version__}))
    assert all(m.__file__.startswith(sys.argv[1]) for m in (sklearn, dask, distributed))
    import cli
    for package in (taskdml, cli):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(module.name)
    warnings.simplefilter("ignore")
    X, y = make_classification(n_samples=400, n_features=6, random_state=0)
    model = taskdml.DataParallel(SGDClassifier(random_state=0), random_state=0).fit(X, y)
    assert (model.predict(X) == y).mean() > 0.6
    search = taskdml.GridSearchCV(SGDClassifier(random_state=0), {"alpha": [1e-4, 1e-2]}, cv=2)
    search.fit(X, y)
    assert set(search.cv_results_["param_alpha"]) == {1e-4, 1e-2}
    callbacks = importlib.util.find_spec("sklearn.callback") is not None
    assert hasattr(search, "set_callbacks") == callbacks
    print("ok")
    """
)


def floor_versions():
    """``{package: floor}`` from ``pyproject.toml``'s dependencies (``name>=floor``)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    dependencies = text.split("\ndependencies = [", 1)[1].split("\n]", 1)[0]
    floors = {}
    for package in FLOOR_PACKAGES:
        match = re.search(rf'"{package}(?:\[[^\]]*\])?>=([0-9][^",;\s]*)', dependencies)
        assert match, f"no {package}>=... in pyproject.toml's dependencies"
        floors[package] = match.group(1)
    return floors


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_floor_versions_work(tmp_path):
    """With the floor scikit-learn, dask and distributed first on the path, every module
    imports, and DataParallel and GridSearchCV fit and predict on in-memory data without a
    cluster. Without the package registry: a failure in CI (``CI=true``), a skip elsewhere."""
    floors = floor_versions()
    target = tmp_path / "floor"
    started = time.perf_counter()
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile"]
        + ["--only-binary=:all:", "--target", str(target)]
        + [f"{package}=={version}" for package, version in floors.items()],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if install.returncode != 0:
        reason = f"cannot install the floor versions {floors}: {install.stderr[-800:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)])}
    run = subprocess.run(
        [sys.executable, "-c", SMOKE, str(target)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    print(f"floor {floors}: {time.perf_counter() - started:.1f} s, {run.stdout.splitlines()[0]}")
    assert run.stdout.split()[-1] == "ok"


def test_dask_hashes_in_memory_arrays_with_xxhash():
    """xxhash is a dependency so that dask's tokenize, which names the keys of every
    in-memory array taskdml scatters or caches, hashes at xxhash's speed rather than sha1's
    (7.5M x 20 float64: 0.2 s against 0.8 s on this machine)."""
    import dask.hashing

    assert dask.hashing.hashers[0].__name__ == "_hash_xxhash"
