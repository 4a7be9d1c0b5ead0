"""Pipeline files: YAML text -> overrides -> interpolation -> schema -> ``PipelineSpec``.

Loading goes through four stages, each reporting every problem it finds with the file, line
and column of the offending key (see :mod:`taskdml.pipeline._yaml`):

1. **parse** safely, remembering where each key path was written;
2. **override** with command-line items in Hydra's grammar: ``key=value`` changes an existing
   key, ``+key=value`` adds one, ``++key=value`` sets either way, ``~key`` deletes. A path whose
   first part is not a top-level section (``steps``, ``cluster``, ...) is read inside
   ``params``, so ``seed=3`` means ``params.seed=3``;
3. **interpolate** ``${params.seed}`` (any absolute key path), ``${oc.env:VAR}`` and
   ``${oc.env:VAR,default}`` (``env:`` for short), OmegaConf's grammar, and
   ``${path:data/table.csv}``: a path relative to the pipeline file's directory (the working
   directory for text without a file), made absolute, so the file runs from anywhere. A
   string that is exactly one ``${...}`` takes the referenced value's type; ``\\${`` is a
   literal ``${``.
   Environment values are parsed like command-line values (``SEED=3`` gives the integer 3),
   where OmegaConf would need ``oc.decode``;
   References are bounded like YAML aliases (:mod:`taskdml.pipeline._yaml`): what they bring may
   nest at most :data:`~taskdml.pipeline._yaml.MAX_DEPTH` levels deep, references and the values
   they bring included, and add at most :data:`MAX_INTERPOLATED_VALUES` values and
   :data:`MAX_INTERPOLATED_CHARS` characters, so that references that repeat each other
   (``b: ${a}${a}``, ``c: ${b}${b}``, ...) are refused instead of growing exponentially;
4. **validate** against the JSON Schema (:mod:`taskdml.pipeline._schema`) and build the
   :class:`~taskdml.PipelineSpec`, which checks references, cycles and callables.
"""

import dataclasses
import os
import re
from pathlib import Path

from taskdml.exceptions import PipelineError, did_you_mean, dotted
from taskdml.pipeline import _schema
from taskdml.pipeline._model import PipelineSpec, Step, renamed_parallel
from taskdml.pipeline._yaml import MAX_DEPTH, Location, dump, load_with_locations, parse_scalar

SECTIONS = tuple(_schema.SCHEMA["properties"])
_INTERPOLATION = re.compile(r"(?<!\\)\$\{([^}]*)\}")
MAX_INTERPOLATED_VALUES = 100_000
"""Values ``${...}`` references may bring into a pipeline file, copies included."""
MAX_INTERPOLATED_CHARS = 1_000_000
"""Characters ``${...}`` references may write into the strings of a pipeline file."""
_OVERRIDE = re.compile(r"^(?P<op>~|\+\+|\+)?(?P<key>[A-Za-z_][\w.\-\[\]]*)(=(?P<value>.*))?$", re.S)


@dataclasses.dataclass(frozen=True)
class PipelineSource:
    """Where a pipeline came from: its file, text and command-line overrides.

    Attributes
    ----------
    path : str
        The file (``"<string>"`` for text given in memory).
    text : str
        The file's text as read, before overrides and interpolation.
    overrides : tuple of str
        The overrides applied, in order.
    """

    path: str
    text: str
    overrides: tuple = ()


def load_pipeline(path, overrides=()):
    """Read a pipeline file, apply *overrides*, and return a validated ``PipelineSpec``.

    Parameters
    ----------
    path : str or Path
        A YAML pipeline file (``taskdml: 1``).
    overrides : sequence of str
        Hydra-style items: ``seed=3``, ``steps.fit.with.alpha=1e-3``, ``+params.new=1``,
        ``~params.unused``.

    Returns
    -------
    PipelineSpec
        Resolved (no interpolation left), with ``source`` set to the file, text and overrides.

    Notes
    -----
    The file's directory and the working directory are appended to ``sys.path`` (after the
    installed packages), so its callables may come from the user's own packages next to it
    (``myproject.features:add`` with ``myproject.*`` in ``imports.allow``);
    :func:`taskdml.run_pipeline` ships those packages to the cluster.

    Raises
    ------
    PipelineError
        For anything invalid; nothing has run. The message lists each problem as
        ``file:line:column: key.path: what was expected, what was found, how to fix it``.

    Examples
    --------
    >>> import taskdml
    >>> pipeline = taskdml.load_pipeline("pipelines/quickstart.yaml", ["seed=3"])  # doctest: +SKIP
    """
    from taskdml.pipeline._paths import importable

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PipelineError(f"{path}: no such pipeline file.") from None
    except (OSError, UnicodeDecodeError) as error:
        raise PipelineError(f"{path}: cannot read the pipeline file: {error}.") from None
    importable(path)  # the user's packages next to the file (or in the working directory)
    return loads_pipeline(text, source=str(path), overrides=overrides)


def loads_pipeline(text, source="<string>", overrides=()):
    """Like :func:`load_pipeline`, for pipeline text already in memory.

    Parameters
    ----------
    text : str
        The pipeline file's YAML text.
    source : str, default ``"<string>"``
        The name messages use in place of a file name.
    overrides : sequence of str
        Hydra-style items, as for :func:`load_pipeline`.

    Returns
    -------
    PipelineSpec

    Raises
    ------
    PipelineError
        For anything invalid, each problem located as ``source:line:column``.

    Examples
    --------
    >>> from taskdml import loads_pipeline
    >>> text = ("taskdml: 1\\nname: demo\\nparams: {seed: 0}\\nsteps:\\n  data:\\n"
    ...         "    call: taskdml.datasets:load_sklearn\\n    with: {name: iris}\\n")
    >>> loads_pipeline(text, overrides=["seed=3"]).params["seed"]
    3
    """
    data, locations = load_with_locations(text, source)
    if not isinstance(data, dict):
        raise PipelineError(
            f"{Location(source, 1, 1)}: a pipeline file is a mapping with keys "
            f"taskdml, name and steps; found {type(data).__name__}."
        )
    overrides = tuple(overrides)
    for item in overrides:
        _apply_override(data, item, locations)
    base = Path(source).parent if source != "<string>" else Path.cwd()
    interpolator = _Interpolator(data, base)
    data = interpolator.resolve()
    if interpolator.exhausted:  # what was resolved is cut short: checking it would mislead
        raise PipelineError(
            _located(interpolator.problems[-1:], locations), problems=interpolator.problems[-1:]
        )
    pipeline, problems = None, interpolator.problems + _schema.check(data, _schema.SCHEMA)
    if not problems:
        pipeline, problems = _build(data, PipelineSource(source, text, overrides), locations)
    if problems:
        raise PipelineError(_located(problems, locations), problems=problems)
    return pipeline


def dump_pipeline(pipeline):
    """The pipeline as YAML text (resolved: no interpolation left).

    Parameters
    ----------
    pipeline : PipelineSpec

    Returns
    -------
    str
        A pipeline file that :func:`loads_pipeline` reads back equal to *pipeline*.
    """
    return dump(pipeline.to_dict())


def _build(data, source, locations=None):
    """Build the PipelineSpec, or collect the problems of every step and of the whole."""
    steps, problems = [], []
    for name, spec in data["steps"].items():
        try:
            parallel = spec.get("parallel")
            if isinstance(parallel, dict) and any(key in parallel for key in _schema.RENAMED_KEYS):
                parallel = renamed_parallel(parallel, name, locations, stacklevel=5)
                spec = {**spec, "parallel": parallel}
            steps.append(Step.from_dict(name, spec))
        except PipelineError as error:
            problems += error.problems
    if problems:
        return None, problems
    fields = {
        key: data[key]
        for key in ("description", "params", "cluster", "silos", "imports", "tracking")
        if key in data
    }
    try:
        return PipelineSpec(data["name"], steps, source=source, **fields), []
    except PipelineError as error:
        return None, error.problems


def _located(problems, locations):
    lines = []
    for path, text in problems:
        where = next(
            (locations[path[:n]] for n in range(len(path), -1, -1) if path[:n] in locations), None
        )
        lines.append(f"{where}: {dotted(path)}: {text}")
    count = f"{len(problems)} problems" if len(problems) > 1 else "1 problem"
    return f"invalid pipeline ({count}):\n" + "\n".join(f"  {line}" for line in lines)


def _apply_override(data, item, locations):
    match = _OVERRIDE.match(item)
    where = Location(f"override {item!r}", 0, 0)
    if not match or (match["op"] != "~" and match["value"] is None):
        raise PipelineError(
            f"{where}: expected key=value, +key=value, ++key=value or ~key "
            "(e.g. seed=3 or steps.fit.with.alpha=0.001)."
        )
    parts = match["key"].split(".")
    if parts[0] not in SECTIONS:
        parts = ["params"] + parts
    path = tuple(parts)
    *parents, last = path
    node = data
    for depth, part in enumerate(parents):
        if not isinstance(node.get(part) if isinstance(node, dict) else None, dict):
            if match["op"] in ("+", "++") and isinstance(node, dict) and part not in node:
                node[part] = {}
            else:
                raise PipelineError(
                    f"{where}: {dotted(path[: depth + 1])} is not a mapping in the "
                    f"file.{did_you_mean(part, node if isinstance(node, dict) else [])}"
                )
        node = node[part]
    exists = last in node
    if match["op"] == "~":
        if not exists:
            raise PipelineError(
                f"{where}: cannot delete {dotted(path)}: it is not in the file."
                f"{did_you_mean(last, node)}"
            )
        del node[last]
        return
    if match["op"] is None and not exists:
        raise PipelineError(
            f"{where}: {dotted(path)} is not in the file.{did_you_mean(last, node)} "
            f"To add a new key write +{match['key']}={match['value']}."
        )
    if match["op"] == "+" and exists:
        raise PipelineError(
            f"{where}: {dotted(path)} already exists; write {match['key']}="
            f"{match['value']} to change it."
        )
    node[last] = parse_scalar(match["value"])
    for key in [key for key in locations if key[: len(path)] == path]:
        del locations[key]
    locations[path] = where


class _Interpolator:
    """Resolve ``${...}`` in a loaded document, with cycle detection.

    A reference that cannot be resolved is left as written and recorded in ``problems``, so
    the schema check still runs and every problem is reported together.
    """

    def __init__(self, data, base):
        self.data, self.base, self.active, self.problems = data, base, [], []
        self.seen, self.depth, self.values, self.chars, self.exhausted = set(), 0, 0, 0, False

    def resolve(self):
        try:
            return self._walk(self.data, ())
        except _Exhausted:
            self.exhausted = True
            return self.data

    def _walk(self, value, path):
        if self.active:
            self.values += 1
            if self.values > MAX_INTERPOLATED_VALUES:
                self._exhaust(
                    path,
                    f"${{...}} references bring more than {MAX_INTERPOLATED_VALUES:,} values "
                    "into the file (references to values that hold references multiply). Refer "
                    "to fewer values, or write them out.",
                )
        if isinstance(value, (dict, list)):
            self._descend(path)
            try:
                if isinstance(value, dict):
                    return {key: self._walk(item, path + (key,)) for key, item in value.items()}
                return [self._walk(item, path + (index,)) for index, item in enumerate(value)]
            finally:
                self.depth -= 1
        if isinstance(value, str) and "${" in value:
            return self._string(value, path)
        return value

    def _descend(self, path, expression=None):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            at = f" at ${{{expression}}}" if expression else ""
            self._exhaust(
                path,
                f"${{...}} references and the values they bring nest more than {MAX_DEPTH} "
                f"levels deep{at}. Refer to the value itself rather than through a chain of "
                "references, and flatten nested values.",
            )

    def _string(self, text, path):
        whole = _INTERPOLATION.fullmatch(text)
        if whole:
            return self._expression(whole[1], path)
        resolved = _INTERPOLATION.sub(lambda m: self._piece(m[1], path), text)
        return resolved.replace("\\${", "${")

    def _piece(self, expression, path):
        piece = str(self._expression(expression, path))
        self.chars += len(piece)
        if self.chars > MAX_INTERPOLATED_CHARS:
            self._exhaust(
                path,
                f"${{...}} references write more than {MAX_INTERPOLATED_CHARS:,} characters "
                "into the file's strings (a string that refers twice to one that does the same "
                "doubles at each step). Refer to fewer values, or write the text out.",
            )
        return piece

    def _expression(self, expression, path):
        try:
            return self._lookup(expression, path)
        except _Unresolved:
            return f"${{{expression}}}"

    def _lookup(self, expression, path):
        expression = expression.strip()
        if expression.startswith(("oc.env:", "env:")):
            name, _, default = expression.partition(":")[2].partition(",")
            if name.strip() in os.environ:
                return parse_scalar(os.environ[name.strip()])
            if default:
                return parse_scalar(default.strip())
            self._fail(
                path,
                f"environment variable {name.strip()!r} is not set and "
                f"${{{expression}}} gives no default; set it or write "
                f"${{oc.env:{name.strip()},default}}.",
            )
        if expression.startswith("path:"):
            relative = expression.partition(":")[2].strip()
            return str((self.base / relative).resolve()) if relative else str(self.base.resolve())
        if ":" in expression:
            self._fail(
                path,
                f"unknown resolver in ${{{expression}}}; oc.env: (or env:) and path: are "
                "supported.",
            )
        target = tuple(expression.split("."))
        node = self.data
        for depth, part in enumerate(target):
            if not isinstance(node, dict) or part not in node:
                choices = node if isinstance(node, dict) else []
                self._fail(
                    path,
                    f"${{{expression}}} refers to {dotted(target[: depth + 1])}, which "
                    f"does not exist.{did_you_mean(part, choices)}",
                )
            node = node[part]
        if target in self.active:
            cycle = " -> ".join(dotted(p) for p in self.active + [target])
            self._fail(path, f"interpolation cycle: {cycle}.")
        self._descend(path, expression)
        self.active.append(target)
        try:
            return self._walk(node, target)
        finally:
            self.active.pop()
            self.depth -= 1

    def _fail(self, path, text):
        if (path, text) not in self.seen:
            self.seen.add((path, text))
            self.problems.append((path, text))
        raise _Unresolved

    def _exhaust(self, path, text):
        self.problems.append((path, text))
        raise _Exhausted


class _Unresolved(Exception):
    """An interpolation that could not be resolved (already recorded as a problem)."""


class _Exhausted(Exception):
    """A bound on what references may bring was crossed; resolving stops (recorded)."""
