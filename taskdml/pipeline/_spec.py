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
    node[last] = _single_value(item, path, match["value"])
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


# --------------------------------------------------------------------------------------------
# Sweeps: the values of ``taskdml run -m`` in Hydra's sweep grammar (its "extended override
# syntax", as its basic sweeper reads it). An override's value is split on the commas outside
# quotes, brackets and parentheses; two or more elements are a choice sweep (``a,b``), and so
# are ``choice(a,b)``, ``range(start, stop[, step])``, ``glob(include, exclude=...)`` and a
# ``sort(...)``/``shuffle(...)`` of one of them. Each element is read as a single override
# value is (``parse_scalar``), a quoted element (``'a,b'``) is one string. The swept keys
# combine as a cartesian product, the last key varying fastest, as Hydra's basic sweeper
# orders its jobs.

SWEEP_FUNCTIONS = ("choice", "range", "glob", "sort", "shuffle", "interval", "tag")
"""The functions of Hydra's sweep grammar (``interval`` and ``tag`` are refused with why)."""
_CALL = re.compile(r"^(?P<name>[A-Za-z_]\w*)\((?P<args>.*)\)$", re.S)
_NAMED = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s*=(?P<value>.*)$", re.S)
_CLOSING = {"[": "]", "{": "}", "(": ")"}


@dataclasses.dataclass(frozen=True)
class Sweep:
    """The runs of a ``-m`` command line: the swept keys, their values, each combination.

    Attributes
    ----------
    keys : tuple of str
        The swept overrides' keys as written (``alpha``, ``steps.fit.with.C``), in order.
    values : tuple of tuple
        Each swept key's values, in sweep order.
    fixed : tuple of str
        The overrides that are not sweeps, applied to every run as written.
    combinations : tuple of dict
        ``{key: value}`` of each run, a cartesian product with the last key varying fastest.
    prefixes : tuple of str
        Each swept key's ``+``/``++`` as written (``""`` for none).
    """

    keys: tuple
    values: tuple
    fixed: tuple
    combinations: tuple
    prefixes: tuple = ()

    def overrides(self, index):
        """The override items of run *index*: the fixed ones, then one per swept key.

        Parameters
        ----------
        index : int

        Returns
        -------
        tuple of str
            Items that :func:`load_pipeline` reads back to the combination's values.
        """
        prefixes = dict(zip(self.keys, self.prefixes or ("",) * len(self.keys)))
        return self.fixed + tuple(
            f"{prefixes[key]}{key}={override_text(value)}"
            for key, value in self.combinations[index].items()
        )


def parse_sweep(overrides):
    """Expand ``-m`` overrides in Hydra's sweep grammar into one set of overrides per run.

    Parameters
    ----------
    overrides : sequence of str
        Command-line items: ``key=a,b``, ``key=range(1,4)``, ``key=choice(a,b)``,
        ``key=glob(*)``, ``key=glob([s*,w*],exclude=sync)`` (over the choices the file format
        allows the key, such as ``steps.fit.parallel.mode``), ``key='a,b'`` (one value), and
        every non-sweep override (``seed=3``, ``+new=1``, ``~gone``).

    Returns
    -------
    Sweep

    Raises
    ------
    PipelineError
        For a sweep value that cannot be read (``range(a)``, an empty range, ``glob`` over a
        key without choices, ``interval``), naming the override and the key.

    Examples
    --------
    >>> sweep = parse_sweep(["alpha=0.1,1", "n=range(1,3)", "seed=0"])
    >>> [sweep.overrides(i) for i in range(len(sweep.combinations))][:2]
    [('seed=0', 'alpha=0.1', 'n=1'), ('seed=0', 'alpha=0.1', 'n=2')]
    """
    import itertools

    keys, values, fixed, prefixes = [], [], [], []
    for item in overrides:
        match = _OVERRIDE.match(item)
        swept = None if not match or match["value"] is None else sweep_values(item)
        if swept is None:
            fixed.append(item)
            continue
        if match["op"] == "~":
            raise PipelineError(
                f"{Location(f'override {item!r}', 0, 0)}: a deletion (~{match['key']}) cannot "
                f"be swept; write ~{match['key']} alone, or sweep {match['key']}=a,b."
            )
        if match["key"] in keys:
            raise PipelineError(
                f"{Location(f'override {item!r}', 0, 0)}: {match['key']} is swept twice; "
                "give its values in one override (key=a,b,c)."
            )
        keys.append(match["key"])
        values.append(tuple(swept))
        prefixes.append(match["op"] or "")
    combinations = tuple(dict(zip(keys, chosen)) for chosen in itertools.product(*values))
    return Sweep(tuple(keys), tuple(values), tuple(fixed), combinations, tuple(prefixes))


def sweep_values(item):
    """The values *item*'s value sweeps over, or ``None`` when it sets a single value.

    Parameters
    ----------
    item : str
        One override, ``key=value``.

    Returns
    -------
    list or None

    Raises
    ------
    PipelineError
        When the value is a sweep that cannot be read; the message names the key.

    Examples
    --------
    >>> sweep_values("x=range(0,10,3.3)"), sweep_values("x='a,b'"), sweep_values("x=[1,2]")
    ([0.0, 3.3, 6.6, 9.9], None, None)
    """
    match = _OVERRIDE.match(item)
    if not match or match["value"] is None:
        return None
    parts = match["key"].split(".")
    path = tuple(parts if parts[0] in SECTIONS else ["params"] + parts)
    reader = _SweepReader(item, path)
    pieces = reader.split(match["value"].strip())
    if len(pieces) > 1:
        return [reader.element(piece) for piece in pieces]
    value = reader.value(pieces[0] if pieces else "")
    return list(value.values) if isinstance(value, _Swept) else None


def override_text(value):
    """*value* written as an override value that :func:`parse_scalar` reads back equal.

    Parameters
    ----------
    value : object
        A value a sweep produced.

    Returns
    -------
    str

    Examples
    --------
    >>> override_text("1"), override_text(0.5), override_text("a,b"), override_text([1, "x"])
    ('"1"', '0.5', '"a,b"', '[1, "x"]')
    """
    import json

    if isinstance(value, str) and parse_scalar(value) == value and _plain(value):
        return value
    text = json.dumps(value)
    return text if parse_scalar(text) == value else repr(value)


def _single_value(item, path, text):
    """The value of one override run alone: a sweep (``a,b``, ``range(1,4)``) is refused with
    how to run it, as Hydra refuses one without ``--multirun``; ``sort([3,1,2])`` is computed;
    anything else is read by ``parse_scalar`` as before."""
    reader = _SweepReader(item, path)
    try:
        pieces = reader.split(text.strip())
    except PipelineError:  # unbalanced quotes or brackets: not the sweep grammar, plain text
        return parse_scalar(text)
    call = _CALL.match(pieces[0]) if len(pieces) == 1 else None
    if len(pieces) == 1 and not (call and call["name"] in SWEEP_FUNCTIONS):
        return parse_scalar(text)
    value = reader.value(pieces[0]) if call else _Swept(pieces)
    if isinstance(value, _Swept):
        key = item.split("=", 1)[0]
        other = (
            ""
            if call
            else f"; or quote it to set one string ({key}='{text}'), or write a list "
            f"({key}=[{text}])"
        )
        reader.fail(
            f"{text!r} is a sweep over {len(value.values)} values: run it with -m "
            f"(--multirun), one run per value{other}."
        )
    return value


def _plain(text):
    return text == text.strip() and not any(c in text for c in ",'\"\\()[]{}")


@dataclasses.dataclass
class _Swept:
    """Values a sweep function produced (a plain list stays a value)."""

    values: list


class _SweepReader:
    """Reads one override's value in Hydra's sweep grammar; errors name the override and key."""

    def __init__(self, item, path):
        self.item, self.path = item, path

    def fail(self, text):
        raise PipelineError(
            f"{Location(f'override {self.item!r}', 0, 0)}: {dotted(self.path)}: {text}"
        )

    def split(self, text):
        """*text* cut at the commas outside quotes, brackets and parentheses; ``\\,`` stays."""
        pieces, depth, quote, start, i = [], [], None, 0, 0
        while i < len(text):
            c = text[i]
            if c == "\\":
                i += 2
                continue
            if quote:
                quote = None if c == quote else quote
            elif c in "'\"":
                quote = c
            elif c in _CLOSING:
                depth.append(_CLOSING[c])
            elif depth and c == depth[-1]:
                depth.pop()
            elif c in ")]}":
                self.fail(f"unbalanced {c!r} in {text!r}; close every bracket you open.")
            elif c == "," and not depth:
                pieces.append(text[start:i].strip())
                start = i + 1
            i += 1
        if quote or depth:
            missing = quote or depth[-1]
            self.fail(f"{text!r} is missing a closing {missing!r}.")
        pieces.append(text[start:].strip())
        if len(pieces) > 1 and not all(pieces):
            self.fail(f"{text!r} has an empty element between commas; remove the extra comma.")
        return pieces

    def element(self, text):
        """One element: a quoted string as written, else what ``parse_scalar`` reads."""
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
            return text[1:-1].replace("\\" + text[0], text[0])
        call = _CALL.match(text)
        if call and call["name"] in SWEEP_FUNCTIONS:
            self.fail(
                f"{call['name']}() cannot be one element of a list of values; write "
                f"{call['name']}(...) as the whole value."
            )
        return parse_scalar(re.sub(r"\\(.)", r"\1", text))

    def value(self, text):
        """A whole value: a sweep function's ``_Swept``, or one element."""
        call = _CALL.match(text)
        if not call or call["name"] not in SWEEP_FUNCTIONS:
            return self.element(text)
        args, named = [], {}
        for piece in self.split(call["args"].strip()) if call["args"].strip() else []:
            name = _NAMED.match(piece)
            if name and not _CALL.match(piece):
                named[name["name"]] = self.value(name["value"].strip())
            elif named:
                self.fail(f"in {text!r}, a positional argument follows a named one.")
            else:
                args.append(self.value(piece))
        return getattr(self, "_" + call["name"])(text, args, named)

    def _arguments(self, text, args, named, names):
        given = dict(zip(names, args))
        if len(args) > len(names):
            self.fail(f"{text!r} takes at most {len(names)} arguments ({', '.join(names)}).")
        for key, value in named.items():
            if key not in names:
                self.fail(f"{text!r}: unknown argument {key!r}.{did_you_mean(key, names)}")
            if key in given:
                self.fail(f"{text!r}: {key} is given twice.")
            given[key] = value
        return given

    def _choice(self, text, args, named):
        if named:
            self.fail(f"choice() takes values only, found {', '.join(named)}= in {text!r}.")
        if not args:
            self.fail("choice() is empty; give at least one value: choice(a,b).")
        if any(isinstance(arg, _Swept) for arg in args):
            self.fail(f"nesting sweeps in choice() is not supported: {text!r}.")
        return _Swept(list(args))

    def _range(self, text, args, named):
        import decimal

        given = self._arguments(text, args, named, ("start", "stop", "step"))
        if "stop" not in given:
            given = {
                "start": 0,
                "stop": given.get("start"),
                **{k: given[k] for k in given if k == "step"},
            }
        start, stop, step = given["start"], given["stop"], given.get("step", 1)
        for bound in (start, stop, step):
            if isinstance(bound, bool) or not isinstance(bound, (int, float)):
                self.fail(
                    f"range() takes numbers: range(stop), range(start, stop) or "
                    f"range(start, stop, step); found {bound!r} in {text!r}. "
                    f"Write e.g. {self.item.split('=', 1)[0]}=range(1,4)."
                )
        if step == 0:
            self.fail(f"range() needs a step other than 0, found {text!r}.")
        if all(isinstance(bound, int) for bound in (start, stop, step)):
            values = list(range(start, stop, step))
        else:  # Hydra's FloatRange: each float bound as its exact decimal, summed in decimal
            values, at = [], decimal.Decimal(start)
            stop, step = decimal.Decimal(stop), decimal.Decimal(step)
            while (at < stop) if step > 0 else (at > stop):
                values.append(float(at))
                at += step
        if not values:
            self.fail(f"{text!r} is empty (it stops before its first value); check start and stop.")
        return _Swept(values)

    def _glob(self, text, args, named):
        import fnmatch

        given = self._arguments(text, args, named, ("include", "exclude"))
        if "include" not in given:
            self.fail(f"glob() needs what to include: glob(*) or glob([a*,b*]), found {text!r}.")
        include, exclude = (
            [p] if isinstance(p, str) else list(p or [])
            for p in (given["include"], given.get("exclude"))
        )
        choices = _choices(self.path)
        if choices is None:
            self.fail(
                "glob() selects among the choices the file format allows a key (like "
                "steps.<name>.parallel.mode), and this key has none; list its values "
                "(a,b) or use range()."
            )
        chosen = [
            choice
            for choice in choices
            if any(fnmatch.fnmatchcase(str(choice), p) for p in include)
            and not any(fnmatch.fnmatchcase(str(choice), p) for p in exclude)
        ]
        if not chosen:
            shown = ", ".join(map(str, choices))
            self.fail(f"{text!r} selects none of the key's choices ({shown}).")
        return _Swept(chosen)

    def _sort(self, text, args, named):
        given = self._arguments(text, [], named, ("sweep", "list", "reverse"))
        reverse = given.get("reverse", False)
        target = given.get("sweep", given.get("list"))
        if target is None:
            target = args[0] if len(args) == 1 else _Swept(list(args))
        if not isinstance(target, (_Swept, list)):
            return target  # one value: as it is
        values = target.values if isinstance(target, _Swept) else target
        try:
            ordered = sorted(values, reverse=bool(reverse))
        except TypeError:
            self.fail(f"{text!r} mixes values that cannot be ordered ({values!r}).")
        return _Swept(ordered) if isinstance(target, _Swept) else ordered

    def _shuffle(self, text, args, named):
        import random

        given = self._arguments(text, [], named, ("sweep", "list"))
        target = given.get("sweep", given.get("list"))
        if target is None:
            target = args[0] if len(args) == 1 else _Swept(list(args))
        values = list(target.values if isinstance(target, _Swept) else target)
        random.shuffle(values)
        return _Swept(values) if isinstance(target, _Swept) else values

    def _interval(self, text, args, named):
        self.fail(
            "interval() is for optimising sweepers (Ax, Nevergrad); taskdml -m runs every "
            "combination: give values (a,b) or range(start, stop, step)."
        )

    def _tag(self, text, args, named):
        self.fail("tag() is for optimising sweepers; taskdml -m reads no tags: remove tag().")


def _choices(path):
    """The ``enum`` the file format gives the key at *path*, or ``None``."""
    node = _schema.SCHEMA
    for part in path:
        options = node.get("anyOf", [node])
        node = next(
            (
                option["properties"][part]
                if part in option.get("properties", {})
                else option["additionalProperties"]
                for option in options
                if part in option.get("properties", {})
                or isinstance(option.get("additionalProperties"), dict)
            ),
            None,
        )
        if node is None:
            return None
    enums = [option["enum"] for option in node.get("anyOf", [node]) if "enum" in option]
    return [choice for enum in enums for choice in enum] or None
