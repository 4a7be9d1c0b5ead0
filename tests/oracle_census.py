"""How many test functions compare with an independent reference: a census read from the AST.

Run ``python tests/oracle_census.py`` (per-file and total counts) or add ``--list`` to name
every test that is not counted as a reference, with its category. Nothing is imported or run:
the test files are parsed, so the census takes a second and needs none of the dependencies.

What is counted
    Every function or method named ``test_*`` in ``tests/**/test_*.py``, once however many
    cases ``parametrize`` or hypothesis give it. A module that re-exports a peer's own test
    suite (``test_sklearn_search_suite.py`` loads scikit-learn's ``test_search.py``) counts as
    one reference test: its functions are scikit-learn's, not ours, and are not counted one by
    one.

The categories, in the order a test is given the first that applies
    ``reference``
        At least one assertion involves both a value that went through the code under test and
        a value computed independently in the test (see below), e.g.
        ``assert_allclose(model.coef_, SGDClassifier().fit(X, y).coef_)``,
        ``accuracy == pytest.approx(accuracy_score(y, pred))``,
        ``result == n_chunks * epochs``, or a bound taken from such a value
        (``score >= ref.score(X, y) - 0.02``). Running the code under scikit-learn's own
        estimator checks (``sklearn.utils.estimator_checks``) counts too (a peer's own suite).
    ``self-comparison``
        No reference; an equality (``==``, ``!=``, ``allclose``, ``assert_array_equal``, ...)
        between two values that both went through the code under test (same seed twice, local
        against cluster, chunking A against chunking B, ``f(x)`` against ``g(f(x))``).
    ``loose bounds``
        Neither of the above; an order comparison (``<``, ``>=``, ...) of a value from the code
        under test with a constant or with another value from the code (``accuracy > 0.5``).
    ``structure/messages``
        Everything else: types, shapes, lengths, keys, messages, exit codes, equality with
        literals, ``pytest.raises``.

How values are labelled (a forward data flow through each function, loops read twice)
    *Code under test* (T): the result of calling anything imported from ``taskdml`` or ``cli``,
    of running a process (``subprocess``, click's ``CliRunner``; what it prints, too: a score
    parsed from ``.stdout`` is the code's), and of reading a file
    (``open``, ``Path.read_text``, ``np.load``, ``pd.read_*``, ``json.load``, ...: a test reads
    back what the code wrote). Attributes, items and method results of a T value are T.

    *Independent* (R): the result of a computation that does not touch T values:
    scikit-learn functions (``sklearn.metrics``, ``sklearn.model_selection``, ...), the
    computing methods (``fit``, ``partial_fit``, ``predict``, ``transform``, ``score``, ...) of
    scikit-learn objects and what they yield (``ParameterSampler``'s candidates), NumPy and
    SciPy computations (not the plumbing: ``asarray``, ``concatenate``, ``zeros``, ``arange``,
    ``unique``, ``load``, ``random``, building a ``scipy.sparse`` matrix, ... pass their
    inputs' labels through; ``scipy.sparse.csgraph`` and ``.linalg`` compute), networkx's
    algorithms (a peer's: ``pagerank``, ``connected_components``; its generators make test
    data and its conversions pass labels through), ``math`` and
    ``statistics`` functions, the computing methods of arrays (``mean``, ``sum``, ``std``,
    ``dot``, ...), the loops of ``tests/parallel/reference_loops.py`` (their chunks and the
    order a run recorded are inputs: fed from a run, a loop is still the oracle of what the
    run trained from them; the model they start from must be the test's), and arithmetic
    formulas (a ``*``, ``/``, ``//``, ``**``, ``%`` or ``@`` with a named number or array in
    it: ``2 ** 30`` is a literal). A value mixed from T and R is T, except that a scikit-learn
    computation is R whatever its inputs: an estimator the test builds and fits on the output
    of an earlier step (the split a run made) is the reference of the step under test, and
    ``r2_score(y, model.predict(X))`` the reference of ``model.score(X, y)``; NumPy on the
    code's output is not (``np.mean(output)`` is T).

    An exception caught by ``pytest.raises(...) as caught`` has the labels of the calls its
    block makes, and ``str(caught.value)``, its message, is no probe: the code's error compared
    with the one scikit-learn raises for the same call is a reference.

    An estimator the test hands to the code stays the test's: taskdml clones what it is
    given (scikit-learn's contract for meta-estimators), so a copy of it fitted in the test is
    a reference; a fitted attribute (``coef_``) of an estimator only the test fitted is R.

    *Test data* (D): what ``np.random``, ``dask.array.random`` and ``sklearn.datasets`` draw or
    load (a loader passed as a ``parametrize`` value included), and values built from it (a
    formula on test data, ``y = X @ w > 0``, is test data). It is no reference in itself, except
    as the exact expectation of an equality: the code giving the test's own data back
    (``assert_array_equal(read_csv(path).y, y)``). A computation on test data (``X.mean(0)``,
    ``SGDClassifier().fit(X, y)``) is R.

    Neutral: literals, fixtures that do not call the code, unfitted scikit-learn estimators,
    taskdml's generators, readers and splits (`train_test_split`, `split_edges`) where they make
    a test's input (not in their own tests),
    and whatever a *probe* returns: ``len``, ``type``, ``isinstance``, ``str``, ``repr``,
    ``.shape``, ``.dtype``, ``.chunks``, ... -- a shape computed with NumPy is not a reference.

    Helpers are followed: a function defined in the test module (or in the test, a closure),
    read where it is called with its parameters labelled as the call's arguments, its
    assertions counting as the caller's; a fixture there or in a ``conftest.py`` labels the
    parameter of its name. Parameters of ``parametrize`` take the labels of their values;
    other parameters are neutral.

Conservative by construction: when the flow is unclear the value is T or neutral, never R, so
a test can be undercounted but should not be overcounted. The census is a measure to steer by,
not a proof: ``--list`` shows the tests it did not count, to read.
"""

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent

T, R, S, D = "T", "R", "S", "D"  # code under test, independent, unfitted estimator, test data
CODE_MODULES = ("taskdml", "cli")
REFERENCE_MODULES = ("reference_loops",)
# networkx functions that make a graph (test data), by the end of their names; its other
# functions (pagerank, connected_components, shortest paths) are a peer's computations
NETWORKX_GENERATORS = ("_graph", "_block_model", "_digraph", "_tree", "graph_atlas")
# The loops' inputs that may come from a run (its data, the order it recorded): only the
# model they start from, and the merge, make a loop the code's.
LOOP_INPUTS = {
    "reference_sync": {"chunks", "classes"},
    "replay_async": {"chunks", "classes", "pushes"},
    "reference_sync_windows": {"chunks", "classes", "windows"},
}
PEER_SUITES = {"model_selection/test_sklearn_search_suite.py"}
# taskdml's data generators and readers make a test's input, not the value it checks, except
# in their own tests.
DATA_FUNCTIONS = (
    "taskdml.datasets.",
    ("make_", "read_", "load_", "train_test_split", "split_edges"),
)
DATA_TESTS = {"test_datasets.py", "test_graph_generators.py"}

# fmt: off
NUMPY_PLUMBING = {
    "asarray", "array", "asanyarray", "ascontiguousarray", "copy", "load", "save", "savez",
    "loadtxt", "genfromtxt", "frombuffer", "fromfile", "zeros", "ones", "empty", "full",
    "zeros_like", "ones_like", "empty_like", "full_like", "arange", "linspace", "concatenate",
    "vstack", "hstack", "stack", "column_stack", "ravel", "reshape", "squeeze", "expand_dims",
    "atleast_1d", "atleast_2d", "unique", "array_split", "split", "isfinite", "isnan", "all",
    "any", "shape", "ndim", "size", "iinfo", "finfo", "issubdtype", "dtype", "errstate",
    "may_share_memory", "shares_memory", "set_printoptions", "float64", "float32", "int64",
    "int32", "bool_", "tile", "repeat", "broadcast_to", "where", "nonzero", "flatnonzero",
    "argwhere", "datetime64", "asfortranarray", "memmap", "eye", "identity", "diag",
}
RANDOM_ROOTS = {"random"}  # np.random.*: data
COMPARISONS = {
    "allclose", "isclose", "array_equal", "array_equiv", "approx", "assert_allclose",
    "assert_array_equal", "assert_array_almost_equal", "assert_almost_equal", "assert_equal",
    "assert_array_less", "assert_frame_equal", "assert_series_equal", "assert_index_equal",
    "assert_identical", "assert_approx_equal", "assert_array_max_ulp",
    "assert_allclose_dense_sparse",
}
SKLEARN_PLUMBING_MODULES = (
    "sklearn.utils",
    "sklearn.base",
    "sklearn.exceptions",
    "sklearn.config_context",
    "sklearn.set_config",
    "sklearn.get_config",
    "sklearn.clone",
)
PEER_CHECKS = ("sklearn.utils.estimator_checks",)
ESTIMATOR_METHODS = {
    "fit", "partial_fit", "predict", "predict_proba", "predict_log_proba", "decision_function",
    "transform", "fit_transform", "inverse_transform", "score", "score_samples", "fit_predict",
    "kneighbors", "split",
}  # fmt: skip
COMPUTE_METHODS = {
    "fit", "partial_fit", "predict", "predict_proba", "predict_log_proba", "decision_function",
    "transform", "fit_transform", "inverse_transform", "score", "score_samples", "fit_predict",
    "kneighbors", "split", "get_n_splits", "mean", "sum", "std", "var", "dot", "prod", "cumsum",
    "cumprod", "max", "min", "argmax", "argmin", "median", "quantile", "round", "nanmean",
    "nansum", "count_nonzero", "bincount", "norm", "cov", "corr", "value_counts", "groupby", "agg",
    "apply_along_axis", "argsort", "sort_values",
}
READERS = {
    "read_text", "read_bytes", "read_csv", "read_parquet", "read_json", "open_zarr",
    "open_dataset", "read_pickle", "loads", "safe_load", "load",
}
PROBE_CALLS = {
    "len", "type", "isinstance", "issubclass", "hasattr", "callable", "id", "repr", "str",
    "getattr_static", "key_split", "exists", "is_file", "is_dir",
}
PROBE_ATTRS = {
    "shape", "ndim", "dtype", "size", "chunks", "dims", "sizes", "nbytes", "itemsize", "columns",
    "__class__", "__name__", "__qualname__", "__module__", "name", "kind", "exit_code",
    "returncode", "message", "args", "value", "suffix", "parent",
    "parts",
}
# fmt: on
FORMULA_OPS = (ast.Mult, ast.Div, ast.FloorDiv, ast.Pow, ast.Mod, ast.MatMult)
ORDER_OPS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
EQUALITY_OPS = (ast.Eq, ast.NotEq)


def _dotted(node):
    """``a.b.c`` of a Name/Attribute chain, or None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class Reader:
    """The data flow of one function body: labels of names, and its assertions' kinds."""

    def __init__(self, module, env, helpers, stack=()):
        self.module = module  # name -> qualified origin of imports
        self.module_env = env
        self.env = dict(env)  # name -> frozenset of labels
        self.helpers = helpers  # name -> FunctionDef of the module's helpers
        self.stack = stack  # the helpers being read, to stop recursion
        self.verdicts = []
        self.returns = set()
        self.local = {}  # functions defined in the body
        self.raised = set()  # names bound by ``pytest.raises(...) as name``

    data_is_input = True  # see DATA_FUNCTIONS

    # ---- origins -------------------------------------------------------------------------
    def origin(self, node):
        name = _dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        base = self.module.get(head)
        if base is None:
            return None
        return f"{base}.{rest}" if rest else base

    # ---- labels of expressions ------------------------------------------------------------
    def labels(self, node):
        """The labels of an expression's value."""
        if node is None or isinstance(node, ast.Constant | ast.JoinedStr | ast.Lambda):
            if isinstance(node, ast.Lambda):
                return self.labels(node.body)
            return frozenset()
        if isinstance(node, ast.Name):
            if node.id in self.env:
                return self.env[node.id]
            origin = self.module.get(node.id, "")
            if origin.split(".")[0] in CODE_MODULES:
                return frozenset({T})
            if origin.startswith("sklearn.datasets."):  # a loader passed around: its data
                return frozenset({D})
            return frozenset({R}) if _sklearn_function(origin) else frozenset()
        if isinstance(node, ast.Attribute):
            if node.attr in PROBE_ATTRS:
                return frozenset()
            origin = self.origin(node)
            if origin and origin.split(".")[0] in CODE_MODULES:
                return frozenset({T})
            if origin and origin.startswith("sklearn.datasets."):  # a loader passed around
                return frozenset({D})
            owner = self.labels(node.value)
            if owner == {S} and node.attr.endswith("_") and not node.attr.startswith("__"):
                return frozenset({R})  # a fitted attribute of an estimator only the test fitted
            return owner
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.BinOp):
            left, right = self.labels(node.left), self.labels(node.right)
            both = left | right
            if T in both:
                return both - {R}
            strings = any(  # "%s" % x and [0] * n are no formulas
                isinstance(side, ast.JoinedStr | ast.List | ast.Tuple | ast.ListComp)
                or (isinstance(side, ast.Constant) and isinstance(side.value, str | bytes))
                for side in (node.left, node.right)
            )
            constants = all(  # 2 ** 30 is a literal
                isinstance(n, ast.Constant | ast.operator | ast.unaryop | ast.BinOp | ast.UnaryOp)
                for n in ast.walk(node)
            )
            if isinstance(node.op, FORMULA_OPS) and not strings and not constants and D not in both:
                return both | {R}  # (a formula on test data, y = X @ w > 0, is test data)
            return both
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            saved = dict(self.env)
            for comp in node.generators:
                self.iterate(comp.target, comp.iter)
            parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            out = frozenset().union(*(self.labels(p) for p in parts))
            for comp in node.generators:
                out |= self.labels(comp.iter) - {R, S}
            self.env = saved
            return out
        if isinstance(node, ast.Compare):
            return frozenset().union(self.labels(node.left), *map(self.labels, node.comparators))
        if isinstance(node, ast.Starred | ast.Await | ast.UnaryOp):
            return self.labels(node.value if not isinstance(node, ast.UnaryOp) else node.operand)
        if isinstance(node, ast.Subscript):
            return self.labels(node.value) | (self.labels(node.slice) & {T})
        out = frozenset()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                out |= self.labels(child)
        return out

    def _reference_inputs(self, origin, node):
        """Labels of a reference loop's arguments, less those that are its inputs (the data it
        trains on and the order a parameter server recorded: fed from a run, the loop is
        still the oracle of what the run trained from them)."""
        name = origin.rsplit(".", 1)[-1]
        inputs, params = LOOP_INPUTS.get(name, set()), _reference_params().get(name, [])
        out = frozenset()
        for i, arg in enumerate(node.args):
            if not (i < len(params) and params[i] in inputs):
                out |= self.labels(arg)
        for keyword in node.keywords:
            if keyword.arg not in inputs:
                out |= self.labels(keyword.value)
        return out

    def inline(self, function, node, closure=None):
        """Read a helper's body with its parameters labelled as the call's arguments: its
        assertions count as the caller's, its result is what it returns or yields."""
        if function.name in self.stack or len(self.stack) > 5:
            args = [*node.args, *(k.value for k in node.keywords)]
            return (
                self._mix(frozenset().union(*(self.labels(a) for a in args)) | {T})
                if args
                else frozenset()
            )
        reader = Reader(self.module, self.module_env, self.helpers, (*self.stack, function.name))
        if closure is not None:
            reader.env.update(closure)
            reader.local = dict(self.local)
        params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
        for name in (*params, *(a.arg for a in function.args.kwonlyargs)):
            reader.env[name] = frozenset()
        for name, arg in zip(params, node.args):
            reader.env[name] = self.labels(arg)
        for keyword in node.keywords:
            if keyword.arg is not None:
                reader.env[keyword.arg] = self.labels(keyword.value)
        reader.body(function.body)
        self.verdicts.extend(reader.verdicts)
        return self._mix(frozenset(reader.returns))

    def _mix(self, labels):
        """T swallows R: a value mixed from the code and a reference is the code's."""
        if T in labels:
            return frozenset(labels - {R, S, D})
        if R in labels:
            return frozenset(labels - {S, D})
        return frozenset(labels)

    def call(self, node):
        args = [*node.args, *(k.value for k in node.keywords)]
        arg_labels = frozenset().union(*(self.labels(a) for a in args)) if args else frozenset()
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        origin = self.origin(func) or ""
        root = origin.split(".")[0]
        if not isinstance(func, ast.Name | ast.Attribute):  # f(...)(...): what f returned
            returned = self.labels(func)
            if R in returned and T not in returned:  # a scorer scikit-learn made
                return frozenset({R})
            return self._mix(returned | arg_labels)
        if self._is_message(node):
            return self.env[node.args[0].value.id]
        if isinstance(func, ast.Name) and func.id in PROBE_CALLS and func.id not in self.env:
            return frozenset()
        if (
            isinstance(func, ast.Name)
            and func.id in ("list", "tuple", "sorted")
            and func.id not in self.env
            and len(node.args) == 1
            and self._yields_reference(node.args[0])
        ):
            return frozenset({R})  # list(ParameterGrid(grid))
        if self.data_is_input and origin.startswith(DATA_FUNCTIONS[0]):
            if origin.rsplit(".", 1)[-1].startswith(DATA_FUNCTIONS[1]):
                return arg_labels
        if root in CODE_MODULES or root in ("subprocess",) or name in ("invoke", "Popen"):
            return frozenset({T})
        if isinstance(func, ast.Name) and func.id in self.local and func.id not in self.env:
            return self.inline(self.local[func.id], node, closure=self.env)
        if isinstance(func, ast.Name) and func.id in self.helpers and func.id not in self.env:
            return self.inline(self.helpers[func.id], node)
        if root in REFERENCE_MODULES:
            return self._mix(self._reference_inputs(origin, node) | {R})
        if name == "open" and isinstance(func, ast.Name) or (name in READERS and root != "yaml"):
            return frozenset({T}) if root not in ("numpy",) or name == "load" else arg_labels
        if root == "sklearn":
            if origin.startswith(PEER_CHECKS):
                return frozenset()
            if origin.startswith(SKLEARN_PLUMBING_MODULES):
                return arg_labels
            last = origin.rsplit(".", 1)[-1]
            if origin.startswith("sklearn.datasets."):
                return frozenset({D})
            if last[:1].isupper():  # a class: an unfitted estimator (or a splitter, a grid)
                return frozenset({S})
            return frozenset({R})  # scikit-learn computes it, whatever its inputs
        if root == "networkx":  # a peer: its generators make test data, its algorithms compute
            last = origin.rsplit(".", 1)[-1]
            if last[:1].isupper() or last.endswith(NETWORKX_GENERATORS):
                return frozenset({D})
            if last.startswith(("to_", "from_")) or last in ("relabel_nodes", "number_of_nodes"):
                return arg_labels
            return self._mix(arg_labels | {R})
        if origin.startswith("dask.array.random."):  # test data, drawn chunk by chunk
            return (arg_labels - {R}) | {D}
        if root in ("numpy", "scipy", "math", "statistics"):
            parts = origin.split(".")
            if root == "numpy" and (parts[1:2] and parts[1] in RANDOM_ROOTS):
                return (arg_labels - {R}) | {D}
            if root == "numpy" and parts[-1] in NUMPY_PLUMBING:
                return arg_labels
            if root == "scipy" and "sparse" in parts and not {"csgraph", "linalg"} & set(parts):
                return arg_labels  # building a sparse matrix; its graph algorithms compute
            if parts[-1] in COMPARISONS or parts[-1] in ("isnan", "isfinite", "isinf"):
                return arg_labels
            return self._mix(arg_labels | {R})
        if isinstance(func, ast.Attribute):
            owner = self.labels(func.value)
            if name in ESTIMATOR_METHODS and T not in owner and owner & {S, R}:
                return frozenset({R})  # an estimator the test built computes it
            if name in COMPUTE_METHODS and T not in owner:
                if S in owner or R in owner or (not owner - {D} and name not in ("fit", "split")):
                    return self._mix(owner | arg_labels | {R})
            if name in ("copy", "deepcopy") or origin in ("copy.copy", "copy.deepcopy"):
                return self._mix(owner | arg_labels)
            return self._mix((owner - {S}) | arg_labels)
        if isinstance(func, ast.Name) and func.id in self.env:  # a parameter that is callable
            if self.env[func.id] == {R}:  # a scikit-learn function (a metric) passed in
                return frozenset({R})
            return self._mix(self.env[func.id] | arg_labels)
        return self._mix(arg_labels - {S})

    # ---- assertions -----------------------------------------------------------------------
    def _scan(self, node):
        """(has T, has an independent sub-expression) of an assertion's expression."""
        labels = self.labels(node)
        coded = T in labels
        clean = R in labels and not coded
        if self._is_message(node):
            return coded, clean
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and (node.func.id in PROBE_CALLS)
        ):
            return False, False
        if isinstance(node, ast.Attribute) and node.attr in PROBE_ATTRS:
            return False, False
        if isinstance(node, ast.Call) and T in self.labels(node.func):
            return True, False  # what the code computes from the test's values is the code's
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                c, r = self._scan(child)
                coded, clean = coded or c, clean or r
        return coded, clean

    def judge(self, operands, kind):
        """The verdict of one assertion over its operands: kind is 'eq', 'order' or 'other'."""
        scans = [self._scan(op) for op in operands]
        coded = [c for c, _ in scans]
        if any(coded) and any(r for _, r in scans):
            return "reference"
        if kind == "eq" and any(coded) and any(self.labels(op) == {D} for op in operands):
            return "reference"  # the code gives back the test's own data, exactly
        n_coded = sum(coded)
        if kind == "eq" and n_coded >= 2:
            return "self-comparison"
        if kind == "order" and n_coded:
            return "loose bounds"
        return "structure/messages"

    def assertion(self, test):
        if isinstance(test, ast.Compare):
            ops = test.ops
            if all(isinstance(op, ast.In | ast.NotIn | ast.Is | ast.IsNot) for op in ops):
                self.verdicts.append("structure/messages")
                return
            kind = "order" if any(isinstance(op, ORDER_OPS) for op in ops) else "eq"
            sides = [test.left, *test.comparators]
            if kind == "eq" and any(self._is_approx(s) for s in sides):
                kind = "eq"
            self.verdicts.append(self.judge(sides, kind))
            return
        if isinstance(test, ast.BoolOp):
            for value in test.values:
                self.assertion(value)
            return
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self.assertion(test.operand)
            return
        if isinstance(test, ast.Call) and self._comparison_name(test):
            self.verdicts.append(self.judge(test.args[:2], "eq"))
            return
        if (
            isinstance(test, ast.Call)
            and isinstance(test.func, ast.Name)
            and test.func.id in ("all", "any")
            and test.args
            and isinstance(test.args[0], ast.GeneratorExp)
        ):
            saved = dict(self.env)
            for comp in test.args[0].generators:
                self.iterate(comp.target, comp.iter)
            self.assertion(test.args[0].elt)
            self.env = saved
            return
        self.verdicts.append(self.judge([test], "other"))

    def _is_approx(self, node):
        return isinstance(node, ast.Call) and self._comparison_name(node) == "approx"

    def _comparison_name(self, node):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        return name if name in COMPARISONS else None

    # ---- statements -----------------------------------------------------------------------
    def _yields_reference(self, iterable):
        """Whether *iterable* is a scikit-learn object built in the test that yields what it
        computes (``ParameterSampler(...)``, ``KFold(3).split(X)``), or a list of them."""
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name):
            if iterable.func.id in ("list", "tuple", "sorted") and len(iterable.args) == 1:
                return self._yields_reference(iterable.args[0])
        return isinstance(iterable, ast.Call) and self.labels(iterable) in ({S}, {R})

    def iterate(self, target, iterable):
        """Bind a loop's (or a comprehension's) target to what *iterable* yields."""
        if self._yields_reference(iterable):
            self.bind(target, None, frozenset({R}))
        else:
            self.bind(target, iterable)

    def bind(self, target, value, labels=None):
        if labels is None:
            if (
                isinstance(target, ast.Tuple | ast.List)
                and isinstance(value, ast.Tuple | ast.List)
                and len(target.elts) == len(value.elts)
            ):
                for t, v in zip(target.elts, value.elts):
                    self.bind(t, v)
                return
            if (
                isinstance(target, ast.Tuple | ast.List)
                and isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id in ("zip", "enumerate")
                and value.func.id not in self.env
            ):
                items = list(value.args)
                if value.func.id == "enumerate":
                    items = [ast.Constant(0), *items[:1]]
                if len(items) == len(target.elts):
                    for t, v in zip(target.elts, items):
                        self.bind(t, v)
                    return
            labels = self.labels(value)
        if isinstance(target, ast.Name):
            self.env[target.id] = labels
        elif isinstance(target, ast.Tuple | ast.List | ast.Starred):
            for elt in getattr(target, "elts", [getattr(target, "value", None)]):
                if elt is not None:
                    self.bind(elt, None, labels)
        elif isinstance(target, ast.Attribute | ast.Subscript):
            root = target
            while isinstance(root, ast.Attribute | ast.Subscript):
                root = root.value
            if isinstance(root, ast.Name):
                self.env[root.id] = self._mix(self.env.get(root.id, frozenset()) | labels)

    def body(self, statements):
        for statement in statements:
            self.statement(statement)

    def statement(self, node):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self.bind(target, node.value)
            self._effects(node.value)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            if node.value is not None:
                labels = self.labels(node.value)
                if isinstance(node, ast.AugAssign):
                    labels = self._mix(labels | self.labels(node.target))
                self.bind(node.target, None, labels)
                self._effects(node.value)
        elif isinstance(node, ast.Assert):
            self.assertion(node.test)
        elif isinstance(node, ast.Expr):
            self._effects(node.value)
        elif isinstance(node, ast.Return) and node.value is not None:
            self.returns |= self.labels(node.value)
            self._effects(node.value)
        elif isinstance(node, ast.For | ast.AsyncFor):
            for _ in range(2):
                self.iterate(node.target, node.iter)
                self.body(node.body)
            self.body(node.orelse)
        elif isinstance(node, ast.While):
            for _ in range(2):
                self.body(node.body)
        elif isinstance(node, ast.If):
            self.body(node.body)
            self.body(node.orelse)
        elif isinstance(node, ast.With | ast.AsyncWith):
            caught = []
            for item in node.items:
                self._effects(item.context_expr)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, item.context_expr)
                    if _is_raises(item) and isinstance(item.optional_vars, ast.Name):
                        caught.append(item.optional_vars.id)
            self.body(node.body)
            for name in caught:  # the exception: what the block computed raised it
                self.env[name] = self._mix(self._block_labels(node.body))
                self.raised.add(name)
        elif isinstance(node, ast.Try):
            self.body(node.body)
            for handler in node.handlers:
                self.body(handler.body)
            self.body(node.orelse)
            self.body(node.finalbody)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self.env.pop(node.name, None)
            self.local[node.name] = node  # a closure: read where it is called

    def _block_labels(self, statements):
        """The labels of the outermost calls a block makes (what may have raised)."""
        out = frozenset()
        for statement in statements:
            for node in ast.walk(statement):
                if isinstance(node, ast.Expr | ast.Assign) and isinstance(node.value, ast.Call):
                    out |= self.labels(node.value)
        return out

    def _is_message(self, node):
        """``str(caught.value)`` of an exception caught by ``pytest.raises``: its message is
        the value a peer's own exception is compared with."""
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "str"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Attribute)
            and node.args[0].attr == "value"
            and isinstance(node.args[0].value, ast.Name)
            and node.args[0].value.id in self.raised
        )

    def _effects(self, value):
        """Assertion calls, yields, and method calls that change their object (``ref.fit``)."""
        for node in ast.walk(value):
            if isinstance(node, ast.Yield | ast.YieldFrom) and node.value is not None:
                self.returns |= self.labels(node.value)
        if not isinstance(value, ast.Call):
            if isinstance(value, ast.Await):
                self._effects(value.value)
            return
        name = self._comparison_name(value)
        if name and name != "approx":
            self.verdicts.append(self.judge(value.args[:2], "eq"))
            return
        origin = self.origin(value.func) or ""
        if origin.startswith(PEER_CHECKS):
            args = [*value.args, *(k.value for k in value.keywords)]
            labels = frozenset().union(*(self.labels(a) for a in args)) if args else frozenset()
            self.verdicts.append("reference" if T in labels else "structure/messages")
            return
        func = value.func
        if isinstance(func, ast.Attribute):
            labels = self.labels(value)
            root = func.value
            while isinstance(root, ast.Attribute | ast.Subscript):
                root = root.value
            if isinstance(root, ast.Name) and root.id in self.env:
                self.env[root.id] = self._mix(self.env[root.id] | labels)
        else:
            self.labels(value)


def _is_raises(item):
    """Whether a ``with`` item is ``pytest.raises(...)``."""
    expr = item.context_expr
    return isinstance(expr, ast.Call) and (_dotted(expr.func) or "").endswith("raises")


def _sklearn_function(origin):
    """Whether *origin* names a scikit-learn function that computes (a metric, a split)."""
    last = origin.rsplit(".", 1)[-1]
    return (
        origin.startswith("sklearn.")
        and origin.count(".") >= 2  # sklearn.metrics.r2_score, not the module sklearn.metrics
        and last[:1].islower()
        and not origin.startswith((*SKLEARN_PLUMBING_MODULES, *PEER_CHECKS, "sklearn.datasets."))
    )


def _reference_params():
    """Parameter names of the reference loops' functions."""
    if not hasattr(_reference_params, "cache"):
        tree = ast.parse((TESTS / "parallel" / "reference_loops.py").read_text())
        _reference_params.cache = {
            f.name: [a.arg for a in f.args.args] for _, f in _functions(tree)
        }
    return _reference_params.cache


def _imports(tree):
    """name -> qualified origin, for the module's top-level and in-function imports."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    names[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _parametrized(function, reader):
    """Labels of ``parametrize`` arguments, from the values they take."""
    env = {}
    for decorator in function.decorator_list:
        if not (isinstance(decorator, ast.Call) and _dotted(decorator.func) or "").endswith(
            "parametrize"
        ):
            continue
        if len(decorator.args) < 2 or not isinstance(decorator.args[0], ast.Constant):
            continue
        names = [n.strip() for n in str(decorator.args[0].value).split(",") if n.strip()]
        values = decorator.args[1]
        rows = values.elts if isinstance(values, ast.List | ast.Tuple) else []
        for i, name in enumerate(names):
            labels = frozenset()
            for row in rows:
                if isinstance(row, ast.Call) and _dotted(row.func) == "pytest.param":
                    row = row.args[0] if len(row.args) == 1 else ast.Tuple(row.args)
                if len(names) == 1:
                    labels |= reader.labels(row)
                elif isinstance(row, ast.Tuple | ast.List) and i < len(row.elts):
                    labels |= reader.labels(row.elts[i])
            env[name] = labels - {R} if labels & {T} else labels
    return env


def _uses_peer_checks(function, module):
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = _dotted(target) or ""
        head = name.split(".")[0]
        if module.get(head, "").startswith(PEER_CHECKS) or name.startswith(PEER_CHECKS):
            return True
    return False


def _functions(tree):
    """(name, node) of every function at module level or in a class, with its class."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield None, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield node.name, item


def _is_fixture(function):
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (_dotted(target) or "").endswith("fixture"):
            return True
    return False


def _read_fixtures(tree, module, helpers, fixtures):
    """Labels of the module's fixtures: what each yields or returns, its own fixtures labelled
    (in the order they are defined, read twice)."""
    env = _module_env(tree, module, helpers)
    for _ in range(2):
        for _, function in _functions(tree):
            if not _is_fixture(function):
                continue
            reader = Reader(module, env, helpers, (function.name,))
            for a in (*function.args.args, *function.args.kwonlyargs):
                reader.env[a.arg] = fixtures.get(a.arg, frozenset())
            reader.body(function.body)
            fixtures[function.name] = reader._mix(frozenset(reader.returns))


def _helpers(tree):
    """The module's functions that are neither tests nor fixtures, by name."""
    return {
        f.name: f
        for owner, f in _functions(tree)
        if owner is None and not f.name.startswith("test_") and not _is_fixture(f)
    }


def _module_env(tree, module, helpers):
    reader = Reader(module, {}, helpers)
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            reader.statement(node)
    return reader.env


def _conftest_fixtures(path):
    """Fixture labels from the conftest.py files above *path*."""
    fixtures = {}
    folders = [p for p in reversed(path.parents) if TESTS in (p, *p.parents)]
    for folder in folders:
        conftest = folder / "conftest.py"
        if conftest.exists():
            tree = ast.parse(conftest.read_text())
            _read_fixtures(tree, _imports(tree), _helpers(tree), fixtures)
    return fixtures


def classify_file(path):
    """{test name: category} for one test file."""
    tree = ast.parse(path.read_text())
    module = _imports(tree)
    Reader.data_is_input = path.name not in DATA_TESTS
    helpers, fixtures = _helpers(tree), _conftest_fixtures(path)
    _read_fixtures(tree, module, helpers, fixtures)
    env = _module_env(tree, module, helpers)
    out = {}
    for owner, function in _functions(tree):
        if not function.name.startswith("test_"):
            continue
        name = f"{owner}.{function.name}" if owner else function.name
        reader = Reader(module, env, helpers)
        for a in (*function.args.args, *function.args.kwonlyargs):
            reader.env[a.arg] = fixtures.get(a.arg, frozenset())
        reader.env.update(_parametrized(function, reader))
        reader.body(function.body)
        verdicts = set(reader.verdicts)
        if _uses_peer_checks(function, module):
            verdicts.add("reference")
        for category in ("reference", "self-comparison", "loose bounds"):
            if category in verdicts:
                out[name] = category
                break
        else:
            out[name] = "structure/messages"
    return out


CATEGORIES = ("reference", "structure/messages", "self-comparison", "loose bounds")


def census():
    """{relative path: {test: category}} over the test files."""
    results = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        relative = path.relative_to(TESTS).as_posix()
        if relative in PEER_SUITES:
            results[relative] = {"<scikit-learn's own suite>": "reference"}
            continue
        results[relative] = classify_file(path)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--list", action="store_true", help="name the non-reference tests")
    args = parser.parse_args(argv)
    results = census()
    total = Counter()
    width = max(map(len, results))
    short = {"structure/messages": "structure", "self-comparison": "self", "loose bounds": "loose"}
    header = " ".join(f"{short.get(c, c):>10}" for c in CATEGORIES)
    print(f"{'file':<{width}} {'tests':>5} {header}")
    for relative, tests in results.items():
        counts = Counter(tests.values())
        total.update(counts)
        cells = " ".join(f"{counts[c]:>10}" for c in CATEGORIES)
        print(f"{relative:<{width}} {len(tests):>5} {cells}")
    n = sum(total.values())
    cells = " ".join(f"{total[c]:>10}" for c in CATEGORIES)
    print(f"{'total':<{width}} {n:>5} {cells}")
    share = total["reference"] / n if n else 0.0
    print(f"\nreference: {total['reference']}/{n} = {share:.1%}")
    if args.list:
        for relative, tests in results.items():
            for test, category in tests.items():
                if category != "reference":
                    print(f"{category:<20} {relative}::{test}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
