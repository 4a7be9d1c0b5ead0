"""``Step`` and ``PipelineSpec``: the pipeline as immutable, validated Python objects.

The pipeline file is a serialisation of these classes (see :mod:`taskdml.pipeline._spec`). A
``Step`` checks itself against the file format's schema and its kind's rules when it is built; a
``PipelineSpec`` then checks what needs every step at once: names are unique, every input names
an existing step and output, the steps form a DAG (``graphlib``), every callable lies inside
``imports.allow`` and resolves, and keyword arguments match the callable's signature. All
problems are collected and raised together as one :class:`~taskdml.exceptions.PipelineError`
whose ``problems`` carry key paths, so the file loader can point at lines.
"""

import dataclasses
import graphlib
import inspect
import itertools
import pkgutil
import types

from taskdml import _compat
from taskdml.exceptions import PipelineError, did_you_mean
from taskdml.parallel.engine import _options
from taskdml.pipeline import _schema
from taskdml.pipeline._kinds import KINDS
from taskdml.pipeline._trust import DEFAULT_ALLOW, refusal


def freeze(value):
    """Return *value* with dicts as read-only mappings and lists as tuples, recursively.

    Parameters
    ----------
    value : object

    Returns
    -------
    object
        ``types.MappingProxyType`` for mappings, tuples for sequences, *value* otherwise.
    """
    if isinstance(value, (dict, types.MappingProxyType)):
        return types.MappingProxyType({key: freeze(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item) for item in value)
    return value


def thaw(value):
    """Inverse of :func:`freeze`: plain dicts and lists, ready for YAML, JSON or a call.

    Parameters
    ----------
    value : object

    Returns
    -------
    object
        A copy with dicts and lists in place of mappings and tuples.
    """
    if isinstance(value, (dict, types.MappingProxyType)):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(item) for item in value]
    return value


def renamed_parallel(parallel, step, locations=None, stacklevel=4):
    """*parallel* with its renamed keys (``shards``, ``replicas``) under their new names
    (``n_shards``, ``n_replicas``), and a ``FutureWarning`` for each that says where.

    Parameters
    ----------
    parallel : mapping
        A step's ``parallel`` block.
    step : str
        The step's name.
    locations : mapping, optional
        ``{key path: file:line:column}`` of the loaded file, to say where each old key is.
    stacklevel : int, default=4
        The warning's stack level.

    Returns
    -------
    dict

    Raises
    ------
    PipelineError
        When a key is given under both names.
    """
    import warnings

    parallel = dict(parallel)
    for old, new in _schema.RENAMED_KEYS.items():
        if old not in parallel:
            continue
        if new in parallel:
            raise PipelineError(
                problems=[
                    (
                        ("steps", step, "parallel", old),
                        f"{old!r} is the old name of {new!r}, and both are given; keep {new} only.",
                    )
                ]
            )
        path = ("steps", step, "parallel")
        location = (locations or {}).get(path + (old,)) or (locations or {}).get(path)
        where = f"{location}: " if location else ""
        warnings.warn(
            f"{where}steps.{step}.parallel.{old} is deprecated since taskdml 0.2 and will be "
            f"an error in 0.3: rename it {new} (the name ClassSharded and DataParallel use).",
            FutureWarning,
            stacklevel=stacklevel,
        )
        parallel[new] = parallel.pop(old)
    return parallel


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of a pipeline: a callable, a chunk-wise map, a fit, a search, or an evaluation.

    Exactly one of ``call``, ``map``, ``fit``, ``search`` and ``evaluate`` is given; the other
    arguments mirror the keys of a step in the pipeline file (``with_`` is the file's ``with``).

    Parameters
    ----------
    name : str
        Lowercase identifier; it prefixes the step's Dask keys.
    call : str, optional
        ``"module:attr"`` of a callable run as a task.
    fit : str, optional
        ``"module:Class"`` of an estimator fitted on ``inputs["data"]``.
    evaluate : str or sequence of str, optional
        Metric names computed chunk-wise on ``inputs["data"]`` for ``inputs["model"]``.
    with_ : mapping, optional
        Keyword arguments of the callable, or the estimator's parameters.
    inputs : mapping, optional
        Argument name to ``"step"`` or ``"step.output"`` (or a list of them).
    outputs : sequence of str, optional
        Names of the values a ``call`` returns, in order (default ``["result"]``).
    foreach : mapping or sequence of mappings, optional
        Fan-out: ``{key: [values]}`` runs the product over keys; a list of mappings runs each.
    classes : sequence, optional
        All class labels of a classifier fit.
    parallel : mapping, optional
        How a fit (or each search trial) trains: ``mode`` and the engine's options for it
        (``strategy``, ``sync_every``, ``epochs``, ``n_replicas``, ``n_shards``, ...; the
        table is :mod:`taskdml.parallel.engine._options`). The old ``shards`` and
        ``replicas`` are renamed with a ``FutureWarning``.
    search : str, optional
        ``"module:Class"`` of an estimator whose hyperparameters are searched on
        ``inputs["data"]``; with ``method`` (grid, random, halving, hyperband, asha), ``space``,
        ``budget`` (``trials``, ``max_epochs``, ``min_epochs``, ``reduction_factor``), ``cv`` or
        ``validation_fraction``, and ``scoring``.
    method, space, budget, cv, validation_fraction, scoring : optional
        The search's settings (see ``search``).
    map : str, optional
        ``"module:function"`` applied to every chunk of ``inputs["data"]``
        (:mod:`taskdml.steps.map`).
    features : int or sequence of str, optional
        The width (or feature names) of the ``X`` a ``map`` function returns.
    retries : mapping, optional
        ``{times, errors, backoff_s}``: run the step again, at most ``times`` times, when it
        fails with one of the exception classes ``errors`` (builtin names or
        ``"module:Class"``),
        after ``backoff_s`` seconds (default 1), doubled each time.
    description : str, optional
    predict : str, optional
        The method (``predict``, ``predict_proba``, ``decision_function``, ``transform``)
        applied to every chunk of ``inputs["data"]`` by ``inputs["model"]``, or by the model a
        recorded run saved (``model``); written to ``path`` if given (:mod:`taskdml.steps.predict`).
    model : mapping, optional
        ``{run, step}``: a ``predict`` step's model from a recorded run.
    path : str, optional
        Where a ``predict`` step writes its predictions (``.parquet``, ``.zarr``, ``.csv``).

    Examples
    --------
    >>> step = Step("scale", fit="sklearn.preprocessing:StandardScaler",
    ...             inputs={"data": "split.train"})
    >>> step.kind, step.output_names
    ('fit', ('model',))
    """

    name: str
    call: str | None = None
    fit: str | None = None
    evaluate: tuple | str | None = None
    with_: dict | None = None
    inputs: dict | None = None
    outputs: tuple | None = None
    foreach: dict | tuple | None = None
    classes: tuple | None = None
    parallel: dict | None = None
    search: str | None = None
    method: str | None = None
    space: dict | tuple | None = None
    budget: dict | None = None
    cv: int | None = None
    validation_fraction: float | None = None
    scoring: str | None = None
    map: str | None = None
    features: int | tuple | None = None
    retries: dict | None = None
    description: str = ""
    predict: str | None = None
    model: dict | None = None
    path: str | None = None

    def __post_init__(self):
        if self.parallel and any(key in self.parallel for key in _schema.RENAMED_KEYS):
            parallel = renamed_parallel(self.parallel, self.name)
            object.__setattr__(self, "parallel", parallel)
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, freeze(getattr(self, field.name)))
        if isinstance(self.evaluate, str):
            object.__setattr__(self, "evaluate", (self.evaluate,))
        problems = _schema.check(self.to_dict(), _schema.STEP)
        problems += [] if problems else self._kind_problems()
        if problems:
            raise PipelineError(problems=[(("steps", self.name) + p, t) for p, t in problems])

    @property
    def kind(self):
        """``"call"``, ``"map"``, ``"fit"``, ``"search"``, ``"evaluate"`` or ``"predict"``."""
        return next(kind for kind in KINDS if getattr(self, kind) is not None)

    @property
    def target(self):
        """The callable path, estimator class path, or metric names."""
        return getattr(self, self.kind)

    def transient(self, allow=DEFAULT_ALLOW, trust=False):
        """The exception classes ``retries.errors`` names (``()`` without retries).

        Parameters
        ----------
        allow : sequence of str
            The pipeline's ``imports.allow``, for ``"module:Class"`` names.
        trust : bool, default=False

        Returns
        -------
        tuple of type

        Raises
        ------
        PipelineError
            For a name that is not an exception class.
        """
        import builtins

        classes = []
        for name in (self.retries or {}).get("errors", ()):
            if ":" in name:
                found = resolve_callable(name, allow, trust=trust)
            else:
                found = getattr(builtins, name, None)
            if not (isinstance(found, type) and issubclass(found, Exception)):
                hint = did_you_mean(
                    name, [n for n in dir(builtins) if n.endswith(("Error", "Exception"))]
                )
                raise PipelineError(
                    f"retries.errors names {name!r}, which is not an exception class: give a "
                    f"builtin exception (ConnectionError, TimeoutError, OSError) or "
                    f"'module:Class'.{hint}"
                )
            classes.append(found)
        return tuple(classes)

    @property
    def output_names(self):
        """Names of this step's outputs; the first is the one a bare ``"step"`` refers to."""
        return self.outputs if self.outputs else KINDS[self.kind].outputs

    def references(self):
        """Every input reference of this step.

        Yields
        ------
        argument : str
            The input's name.
        position : int or None
            Its index when the input is a list of references.
        step : str
            The step referred to.
        output : str or None
            The output named (``None`` for the step's first output).
        """
        for argument, refs in (self.inputs or {}).items():
            for position, ref in enumerate([refs] if isinstance(refs, str) else refs):
                step, _, output = ref.partition(".")
                yield (
                    argument,
                    (position if not isinstance(refs, str) else None),
                    step,
                    output or None,
                )

    def foreach_items(self):
        """The ``foreach`` fan-out: one ``(label, kwargs)`` per item.

        Returns
        -------
        list of (str, dict)
            ``("a=1,b=10", {"a": 1, "b": 10})`` per item, in product order; ``[(None, {})]``
            for a step without ``foreach``.

        Examples
        --------
        >>> step = Step("sweep", call="numpy:add", foreach={"x1": [1, 2], "x2": [10]})
        >>> step.foreach_items()
        [('x1=1,x2=10', {'x1': 1, 'x2': 10}), ('x1=2,x2=10', {'x1': 2, 'x2': 10})]
        """
        if self.foreach is None:
            return [(None, {})]
        if isinstance(self.foreach, types.MappingProxyType):
            keys = list(self.foreach)
            combos = [
                dict(zip(keys, values)) for values in itertools.product(*self.foreach.values())
            ]
        else:
            combos = [thaw(item) for item in self.foreach]
        return [(",".join(f"{k}={v}" for k, v in combo.items()), combo) for combo in combos]

    def to_dict(self):
        """The step as it is written in a pipeline file (without its name).

        Returns
        -------
        dict
            Only the keys that are set, the kind's first; ``with_`` is written ``with``.
        """
        result = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name != "name" and value not in (None, "", types.MappingProxyType({})):
                result["with" if field.name == "with_" else field.name] = thaw(value)
        kinds = [key for key in result if key in KINDS]
        return {key: result[key] for key in kinds + [k for k in result if k not in kinds]}

    @classmethod
    def from_dict(cls, name, spec):
        """Build a step from its mapping in a pipeline file.

        Parameters
        ----------
        name : str
        spec : mapping
            The step's keys as in the file (``with``, not ``with_``).

        Returns
        -------
        Step
        """
        spec = dict(spec)
        if "with" in spec:
            spec["with_"] = spec.pop("with")
        return cls(name=name, **spec)

    def _kind_problems(self):
        kinds = [kind for kind in KINDS if getattr(self, kind) is not None]
        if len(kinds) != 1:
            found = ", ".join(kinds) if kinds else "none"
            return [((), f"a step needs exactly one of {', '.join(KINDS)}; found {found}.")]
        kind = KINDS[self.kind]
        problems = []
        for key in self.to_dict():
            if key not in kind.keys | {self.kind, "inputs", "description", "retries"}:
                owners = [k for k, spec in KINDS.items() if key in spec.keys]
                problems.append(
                    (
                        (key,),
                        f"key {key!r} does not apply to a {self.kind!r} step; "
                        f"it belongs to {' or '.join(map(repr, owners))} steps.",
                    )
                )
        if self.outputs is not None and kind.outputs_fixed:
            problems.append(
                (
                    ("outputs",),
                    f"a {self.kind!r} step's outputs are fixed: "
                    f"{list(kind.outputs)}; remove 'outputs'.",
                )
            )
        if self.outputs is not None and len(set(self.outputs)) != len(self.outputs):
            problems.append((("outputs",), f"output names repeat: {list(self.outputs)}."))
        inputs = set(self.inputs or {})
        required, allowed = kind.required_inputs, kind.allowed_inputs
        if self.mode == "federated" and allowed is not None:  # its silos load the data
            required, allowed = required - {"data"}, allowed - {"data", "preprocess"}
        for missing in sorted(required - inputs):
            problems.append(
                (
                    ("inputs",),
                    f"a {self.kind!r} step needs input {missing!r} "
                    f"(e.g. inputs: {{{missing}: other_step}}).",
                )
            )
        if allowed is not None:
            for extra in sorted(inputs - allowed):
                federated = self.mode == "federated"
                why = " A federated step's data is loaded by its silos." * federated
                problems.append(
                    (
                        ("inputs", extra),
                        f"unknown input {extra!r} for a {self.kind!r} "
                        f"step.{did_you_mean(extra, allowed)} Allowed: "
                        f"{', '.join(sorted(allowed)) or 'none'}.{why}",
                    )
                )
        return problems + self._parallel_problems() + self._predict_problems()

    def _predict_problems(self):
        """A predict step's model comes from exactly one place."""
        if self.kind != "predict" or (self.model is None) != ("model" not in (self.inputs or {})):
            return []
        if self.model is None:
            return [
                (
                    ("inputs",),
                    "a 'predict' step needs a model: inputs: {model: a_fit_step} or "
                    "model: {run: RUN_ID, step: NAME} (a recorded run's).",
                )
            ]
        return [
            (
                ("model",),
                "a 'predict' step takes its model from inputs.model or from model: "
                "{run, step}, not both; remove one.",
            )
        ]

    @property
    def mode(self):
        """The kind of parallelism the step asks for (``parallel.mode``; default ``"data"``)."""
        return (self.parallel or {}).get("mode", "data")

    def _parallel_problems(self):
        """Keys of ``parallel`` that the step's mode does not read, and modes a search
        cannot use."""
        if not self.parallel or self.kind not in ("fit", "search"):
            return []
        mode = self.mode
        if self.kind == "search" and mode not in ("data", "task", "auto"):
            return [
                (
                    ("parallel", "mode"),
                    f"a search trains its trials data-parallel or one task each: use mode "
                    f"data, task or auto, not {mode!r} (model and federated are for fit steps).",
                )
            ]
        read = _schema.MODE_KEYS["data"] + _schema.MODE_KEYS["model"] if mode == "auto" else ()
        read = set(read or _schema.MODE_KEYS[mode]) | {"mode"}
        problems = []
        for key in self.parallel:
            if key not in read:
                owners = [m for m, keys in _schema.MODE_KEYS.items() if key in keys]
                problems.append(
                    (
                        ("parallel", key),
                        f"{key!r} does not apply to mode {mode!r}; it belongs to mode "
                        f"{' or '.join(map(repr, owners))}.",
                    )
                )
        if self.kind == "search":
            problems += self._search_parallel_problems(read)
        if mode == "federated" and "rounds" not in self.parallel:
            problems.append(
                (("parallel",), "a federated step needs rounds (e.g. parallel: {mode: federated, "
                 "rounds: 10})."),
            )  # fmt: skip
        return problems

    def _search_parallel_problems(self, read):
        """Keys of the mode that this method's search does not take (the options table)."""
        method = self.method or "grid"
        takes = set(_options.names("search" if method in ("grid", "random") else "adaptive"))
        why = {"epochs": " (its budget sets each trial's epochs: budget.max_epochs)"}
        return [
            (
                ("parallel", key),
                f"{key!r} does not apply to method {method!r}{why.get(key, '')}; it takes "
                f"{', '.join(sorted((takes | {'random_state'}) & read))}.",
            )
            for key in self.parallel
            if key in read and key not in takes | {"mode", "random_state"}
        ]


@dataclasses.dataclass(frozen=True)
class PipelineSpec:
    """A DAG of steps with its parameters, cluster and import allowlist.

    Parameters
    ----------
    name : str
    steps : sequence of Step
    description : str, optional
    params : mapping, optional
        The parameters the steps were resolved with (kept for the record).
    cluster : mapping, optional
        ``{n_workers, threads_per_worker, memory_limit}``, ``{address}`` or ``{spec}``.
    silos : mapping, optional
        The parties of federated steps: ``{name: {load, with, workers | resources}}``.
    tracking : mapping, optional
        ``{"mlflow": URI, "experiment": name}``: the run is logged to MLflow
        (:mod:`taskdml.runs._mlflow`).
    imports : mapping, optional
        ``{"allow": [module globs], "trust": bool}``; default allow: ``sklearn.*, taskdml.*,
        numpy, scipy.stats, scipy.sparse, xgboost, lightgbm`` (:mod:`taskdml.pipeline._trust`).
    source : PipelineSource, optional
        The file, text and overrides it was loaded from (set by :func:`taskdml.load_pipeline`).

    Examples
    --------
    >>> pipe = PipelineSpec("demo", [
    ...     Step("data", call="taskdml.datasets:load_sklearn", with_={"name": "iris"}),
    ...     Step("model", fit="sklearn.naive_bayes:GaussianNB", inputs={"data": "data"}),
    ... ])
    >>> [step.name for step in pipe.ordered_steps()]
    ['data', 'model']
    """

    name: str
    steps: tuple
    description: str = ""
    params: dict | None = None
    cluster: dict | None = None
    imports: dict | None = None
    silos: dict | None = None
    tracking: dict | None = None
    source: object = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "steps", tuple(self.steps))
        for field in ("params", "cluster", "imports", "silos", "tracking"):
            object.__setattr__(self, field, freeze(getattr(self, field) or {}))
        problems = _schema.check(self.to_dict(), _schema.SCHEMA)
        if not problems:
            problems = (
                self._graph_problems()
                or self._target_problems()
                or _cluster_problems(self.cluster)
                or self._silo_problems()
            )
        if problems:
            raise PipelineError(problems=problems)

    @property
    def allow(self):
        """Module globs whose callables steps may name."""
        return tuple(self.imports.get("allow", DEFAULT_ALLOW))

    @property
    def trust(self):
        """Whether the file is trusted like code (``imports.trust``;
        :mod:`taskdml.pipeline._trust`)."""
        return bool(self.imports.get("trust", False))

    def resolve(self, step):
        """The callable *step* names, if this pipeline may call it.

        Parameters
        ----------
        step : Step

        Returns
        -------
        object
            The class or function of ``step.target``.

        Raises
        ------
        PipelineError
            When the pipeline may not call it (:mod:`taskdml.pipeline._trust`).

        Examples
        --------
        >>> pipe = PipelineSpec("demo", [Step("model", fit="sklearn.naive_bayes:GaussianNB")])
        >>> pipe.resolve(pipe.step("model")).__name__
        'GaussianNB'
        """
        return resolve_callable(step.target, self.allow, trust=self.trust)

    def step(self, name):
        """The step called *name*.

        Parameters
        ----------
        name : str

        Returns
        -------
        Step

        Raises
        ------
        KeyError
            When there is no such step (with the closest name).
        """
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(f"no step {name!r}.{did_you_mean(name, [s.name for s in self.steps])}")

    def dependencies(self):
        """The DAG's edges.

        Returns
        -------
        dict
            ``{step name: {names of the steps it reads from}}``.
        """
        return {step.name: {ref[2] for ref in step.references()} for step in self.steps}

    def ordered_steps(self):
        """Steps in a topological order (ties keep file order).

        Returns
        -------
        list of Step
        """
        order = {step.name: i for i, step in enumerate(self.steps)}
        sorter = graphlib.TopologicalSorter(self.dependencies())
        sorter.prepare()
        result = []
        while sorter.is_active():
            ready = sorted(sorter.get_ready(), key=order.get)
            result += ready
            sorter.done(*ready)
        return [self.step(name) for name in result]

    def to_dict(self):
        """The pipeline as a pipeline-file mapping (``taskdml: 1``).

        Returns
        -------
        dict
            Plain dicts and lists, valid against :func:`taskdml.schema`.
        """
        result = {"taskdml": 1, "name": self.name}
        if self.description:
            result["description"] = self.description
        for field in ("params", "cluster", "silos", "imports", "tracking"):
            if getattr(self, field):
                result[field] = thaw(getattr(self, field))
        result["steps"] = {step.name: step.to_dict() for step in self.steps}
        return result

    def silos_of(self, step):
        """The silos a federated step trains on, by name, as written in the file.

        Parameters
        ----------
        step : Step

        Returns
        -------
        dict
            ``{name: {load, with, workers | resources}}``; empty for any other step.
        """
        if step.mode != "federated":
            return {}
        names = step.parallel.get("silos") or list(self.silos)
        return {name: thaw(self.silos[name]) for name in names}

    def _silo_problems(self):
        problems = []
        for name, silo in self.silos.items():
            path = ("silos", name)
            if ("workers" in silo) == ("resources" in silo):
                problems.append(
                    (path, "a silo needs one of workers: [names] or resources: {name: 1}.")
                )
            try:
                resolve_callable(silo["load"], self.allow, trust=self.trust)
            except PipelineError as error:
                problems.append((path + ("load",), str(error)))
        for step in self.steps:
            if step.mode != "federated":
                continue
            if not self.silos:
                problems.append(
                    (
                        ("steps", step.name, "parallel", "mode"),
                        "a federated step needs a silos: block at the top of the file "
                        "(name -> {load, with, workers or resources}).",
                    )
                )
            for position, name in enumerate(step.parallel.get("silos", ())):
                if name not in self.silos:
                    problems.append(
                        (
                            ("steps", step.name, "parallel", "silos", position),
                            f"unknown silo {name!r}.{did_you_mean(name, self.silos)} "
                            f"Silos: {', '.join(self.silos) or 'none'}.",
                        )
                    )
        return problems

    def _graph_problems(self):
        problems = []
        names = [step.name for step in self.steps]
        for name in {n for n in names if names.count(n) > 1}:
            problems.append((("steps", name), f"two steps are called {name!r}; rename one."))
        outputs = {step.name: step.output_names for step in self.steps}
        for step in self.steps:
            for argument, position, ref_step, ref_output in step.references():
                path = ("steps", step.name, "inputs", argument) + (
                    (position,) if position is not None else ()
                )
                if ref_step not in outputs:
                    problems.append(
                        (
                            path,
                            f"unknown step {ref_step!r}.{did_you_mean(ref_step, names)} "
                            f"Steps: {', '.join(names)}.",
                        )
                    )
                elif ref_step == step.name:
                    problems.append((path, f"step {step.name!r} cannot read its own output."))
                elif ref_output is not None and ref_output not in outputs[ref_step]:
                    problems.append(
                        (
                            path,
                            f"step {ref_step!r} has no output {ref_output!r}."
                            f"{did_you_mean(ref_output, outputs[ref_step])} Its outputs: "
                            f"{', '.join(outputs[ref_step])}.",
                        )
                    )
        if not problems:
            try:
                graphlib.TopologicalSorter(self.dependencies()).prepare()
            except graphlib.CycleError as error:
                cycle = error.args[1]
                problems.append(
                    (
                        ("steps", cycle[0], "inputs"),
                        f"the steps form a cycle: {' -> '.join(cycle)} (each feeds the "
                        "next). Remove one of these inputs: a step cannot depend on itself.",
                    )
                )
        return problems

    def _target_problems(self):
        problems = []
        for step in self.steps:
            try:
                step.transient(self.allow, self.trust)
            except PipelineError as error:
                problems.append((("steps", step.name, "retries", "errors"), str(error)))
            if step.kind == "evaluate":
                problems += _metric_problems(step)
                continue
            if step.kind == "predict":  # its target is a method; the model is checked as it runs
                continue
            if step.kind == "search":
                problems += _search_problems(step)
            path = ("steps", step.name, step.kind)
            arguments = [{**thaw(step.with_ or {}), **params} for _, params in step.foreach_items()]
            try:
                target = resolve_callable(
                    step.target, self.allow, trust=self.trust, arguments=arguments
                )
            except PipelineError as error:
                problems.append((path, str(error)))
                continue
            problems += [(("steps", step.name) + p, t) for p, t in _argument_problems(step, target)]
        return problems


def _cluster_problems(cluster):
    """What the schema cannot say about a ``cluster`` block: choices that exclude each other."""
    problems = []
    spec = cluster.get("spec", {})
    if "address" in cluster and spec:
        problems.append(
            (
                ("cluster", "spec"),
                "give either address (a running scheduler) or spec (a cluster class to start), "
                "not both; remove one.",
            )
        )
    if "scale" in spec and "adapt" in spec:
        problems.append(
            (
                ("cluster", "spec", "adapt"),
                "give either scale (a fixed number of workers) or adapt (a range), not both; "
                "remove one.",
            )
        )
    adapt = spec.get("adapt", {})
    if adapt.get("minimum", 0) > adapt.get("maximum", float("inf")):
        problems.append(
            (
                ("cluster", "spec", "adapt"),
                f"expected minimum <= maximum, found minimum={adapt['minimum']!r} and "
                f"maximum={adapt['maximum']!r}; swap them.",
            )
        )
    return problems


def resolve_callable(path, allow=DEFAULT_ALLOW, *, trust=False, arguments=()):
    """Import ``"module:attr"`` if *allow* permits its module (see :mod:`taskdml.pipeline._trust`).

    Parameters
    ----------
    path : str
        ``"module:attr"``.
    allow : sequence of str
        Module globs (``"sklearn.*"``); modules that run commands are refused whatever it says.
    trust : bool, default=False
        The file is trusted like code: deserialisers and code loaders may be named.
    arguments : iterable of mapping
        The keyword arguments the step calls it with (``numpy.load`` with ``allow_pickle``).

    Returns
    -------
    object
        The attribute.

    Raises
    ------
    PipelineError
        When the module is not allowed, cannot be imported, or has no such attribute.
    """
    module = path.partition(":")[0]
    reason = refusal(path, allow, trust=trust, arguments=arguments)
    if reason is not None:
        raise PipelineError(reason)
    try:
        return pkgutil.resolve_name(path)
    except ModuleNotFoundError as error:
        raise PipelineError(
            f"cannot import {path!r}: no module named {error.name!r}. Is it "
            "installed in this environment?"
        ) from None
    except AttributeError:
        import importlib

        owner = importlib.import_module(module)
        attr = path.partition(":")[2]
        hint = did_you_mean(attr, [name for name in dir(owner) if not name.startswith("_")])
        raise PipelineError(
            f"cannot import {path!r}: module {module!r} has no attribute {attr!r}.{hint}"
        ) from None


_SEARCH_NEEDS = {
    "grid": (),
    "random": ("trials",),
    "halving": ("trials", "max_epochs"),
    "hyperband": ("max_epochs",),
    "asha": ("trials", "max_epochs"),
}


def _search_problems(step):
    """A search names its method and budget; ``grid`` needs lists only."""
    from taskdml.model_selection._space import from_spec, is_grid

    if step.method is None:
        return [
            (
                ("steps", step.name),
                f"a search step needs 'method': one of {', '.join(_SEARCH_NEEDS)}.",
            )
        ]
    if step.space is None:
        return [
            (
                ("steps", step.name),
                "a search step needs 'space': parameter -> values or distribution.",
            )
        ]
    problems = [
        (
            ("steps", step.name, "budget"),
            f"method {step.method!r} needs budget.{need} (e.g. budget: {{{need}: 27}}).",
        )
        for need in _SEARCH_NEEDS[step.method]
        if need not in (step.budget or {})
    ]
    try:
        space = from_spec(thaw(step.space))
    except PipelineError as error:
        return problems + [(("steps", step.name, "space"), str(error))]
    if step.method == "grid" and not is_grid(space):
        problems.append(
            (
                ("steps", step.name, "space"),
                "a grid search needs lists of values; use "
                "method: random (or asha, hyperband) for distributions.",
            )
        )
    return problems


def _metric_problems(step):
    from taskdml.metrics import available_metrics

    known = available_metrics()
    return [
        (
            ("steps", step.name, "evaluate") + ((i,) if len(step.evaluate) > 1 else ()),
            f"unknown metric {name!r}.{did_you_mean(name, known)} Known: {', '.join(known)}.",
        )
        for i, name in enumerate(step.evaluate)
        if name not in known
    ]


def _estimator_value_problems(step, target):
    """Let scikit-learn check parameter values now rather than when the fit starts."""
    problems = []
    for label, item in step.foreach_items():
        estimator = target(**thaw(step.with_ or {}), **item)
        try:
            if not _compat.validate_params(estimator):  # not a scikit-learn estimator
                return []
        except (ValueError, TypeError) as error:
            where = ("foreach",) if label else ("with",)
            problems.append(
                (where, f"{error}".rstrip(".") + (f" (item {label})" if label else "") + ".")
            )
    return problems


def _argument_problems(step, target):
    """Check ``with``, ``inputs`` and ``foreach`` against the callable's parameters."""
    keys = {key for _, item in step.foreach_items() for key in item}
    foreach = [("foreach", key) for key in sorted(keys)]
    if step.kind in ("fit", "search") and callable(target) and not isinstance(target, type):
        return _factory_problems(step, target, foreach)
    if step.kind in ("fit", "search"):
        if not (isinstance(target, type) and hasattr(target, "fit")):
            return [((step.kind,), f"{step.target!r} is not an estimator class with a fit method.")]
        accepted = set(target().get_params(deep=True))
        space = step.space if isinstance(step.space, tuple) else (step.space or {},)
        searched = [("space", name) for branch in space for name in branch]
        given = [("with", name) for name in step.with_ or {}] + foreach + searched
        return _unknown(step, given, accepted, "parameter") or _estimator_value_problems(
            step, target
        )
    if not callable(target):
        return [((step.kind,), f"{step.target!r} is not callable.")]
    try:
        parameters = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):  # builtins without a signature: nothing to check
        return []
    inputs = list(step.inputs or {})
    if step.kind == "map":  # the chunk is the first argument; inputs.data is not a keyword
        if not parameters or parameters[0].kind not in (
            parameters[0].POSITIONAL_ONLY,
            parameters[0].POSITIONAL_OR_KEYWORD,
            parameters[0].VAR_POSITIONAL,
        ):
            return [
                (
                    ("map",),
                    f"{step.target!r} takes no positional argument: a map function "
                    "receives each chunk first, e.g. def f(chunk, **options).",
                )
            ]
        parameters, inputs = parameters[1:], [name for name in inputs if name != "data"]
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return []
    accepted = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    given = (
        [("with", name) for name in step.with_ or {}]
        + [("inputs", name) for name in inputs]
        + foreach
    )
    return _unknown(step, given, accepted, "argument")


def _factory_problems(step, factory, foreach):
    """A ``fit:`` or ``search:`` factory (a function that returns an estimator, such as a
    Pipeline): ``with`` and ``foreach`` against its signature, then what it returns (and a
    search's ``space`` against the returned estimator's parameters)."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        parameters = None
    if parameters is not None and not any(p.kind is p.VAR_KEYWORD for p in parameters):
        accepted = {
            p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        }
        given = [("with", name) for name in step.with_ or {}] + foreach
        problems = _unknown(step, given, accepted, "argument")
        if problems:
            return problems
    problems = []
    for label, item in step.foreach_items():
        try:
            estimator = factory(**thaw(step.with_ or {}), **item)
        except Exception as error:  # the user's code: report it, do not crash validation
            where = ("foreach",) if label else (step.kind,)
            problems.append((where, f"{step.target!r} failed: {type(error).__name__}: {error}"))
            continue
        if not hasattr(estimator, "fit"):
            problems.append(
                (
                    (step.kind,),
                    f"{step.target!r} returned {type(estimator).__name__}, not an estimator "
                    "(an object with a fit method); return a scikit-learn estimator or "
                    "Pipeline, or name an estimator class.",
                )
            )
        elif step.kind == "search":
            space = step.space if isinstance(step.space, tuple) else (step.space or {},)
            searched = [("space", name) for branch in space for name in branch]
            accepted = set(estimator.get_params(deep=True))
            problems += _unknown(step, searched, accepted, "parameter")
    return problems


def _unknown(step, given, accepted, noun):
    return [
        (
            (section, name),
            f"{step.target!r} takes no {noun} {name!r}."
            f"{did_you_mean(name, accepted)} It accepts: "
            f"{', '.join(sorted(accepted)) or 'nothing'}.",
        )
        for section, name in given
        if name not in accepted
    ]
