"""Cache keys: what a step's outputs depend on, hashed; and why a step ran again.

A step's key is the SHA-256 of its *parts*, all known before anything runs:

- ``format``: :data:`FORMAT`, the layout of cache entries (a new layout misses every old entry);
- ``spec``: the step as resolved (after overrides and interpolation), without the keys that do
  not change its outputs (``description``, ``retries``), and for a federated step the silos
  it trains on (their loaders, arguments and workers);
- ``code``: a fingerprint of every module whose code the step runs — the module of its target
  and of every ``"module:attr"`` named inside its parameters (estimators given as values),
  ``taskdml.metrics`` for an evaluation. A module installed as a library (under
  ``site-packages``) is fingerprinted by its distribution's name and version, any other (the
  user's own code, an editable checkout) by the SHA-256 of its source file;
- ``inputs``: the keys of the steps it reads, so a step whose input re-ran misses too;
- ``files``: size and modification time of every file that a path among its arguments names
  (a file, a folder, a glob, or an fsspec URL), so new data misses.

A part that cannot be computed (a module whose source cannot be found) gives the step no key:
it runs, is not cached, and the reason is recorded; its dependants have no key either.
:func:`explain` compares a step's parts with those of its last run and says why it ran.
"""

import dataclasses
import functools
import glob
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import sysconfig
from pathlib import Path

FORMAT = 2
"""The layout of cache entries, part of every key."""

_NOT_OUTPUTS = ("description", "retries")
_NAMED_CALLABLE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_MOST_FILES = 10_000  # files fingerprinted under one folder or glob


@dataclasses.dataclass(frozen=True)
class StepKey:
    """The key of one step, or why it has none.

    Attributes
    ----------
    key : str or None
    parts : dict or None
        What the key hashes.
    problem : str or None
        Why there is no key.
    """

    key: str | None
    parts: dict | None
    problem: str | None = None


def step_keys(pipeline):
    """The key of every step of *pipeline*, in its order.

    Parameters
    ----------
    pipeline : PipelineSpec

    Returns
    -------
    dict
        ``{step name: StepKey}``.
    """
    keys = {}
    for step in pipeline.ordered_steps():
        try:
            parts = _parts(step, keys, pipeline.silos_of(step))
        except _NoKey as problem:
            keys[step.name] = StepKey(None, None, str(problem))
            continue
        digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
        keys[step.name] = StepKey(digest[:32], parts)
    return keys


class _NoKey(Exception):
    """A part of a step's key cannot be computed."""


def _parts(step, keys, silos):
    if step.path is not None:  # the file it writes is its output, and no cache entry holds it
        raise _NoKey(f"it writes its predictions to {step.path}, which it does each run")
    if step.model is not None and step.model["run"] == "latest":
        raise _NoKey("its model is the latest run's, which changes with each run")
    spec = {k: v for k, v in step.to_dict().items() if k not in _NOT_OUTPUTS}
    if silos:  # a federated step reads the data its silos load
        spec["silos"] = silos
    inputs = {}
    for argument, position, ref_step, ref_output in step.references():
        if keys[ref_step].key is None:
            raise _NoKey(f"its input {ref_step} has no key ({keys[ref_step].problem})")
        where = argument if position is None else f"{argument}[{position}]"
        inputs[where] = {"step": ref_step, "output": ref_output, "key": keys[ref_step].key}
    return {
        "format": FORMAT,
        "spec": spec,
        "code": {module: fingerprint(module) for module in _modules(step, spec)},
        "inputs": inputs,
        "files": _files(spec),
    }


def _modules(step, spec):
    if step.kind == "evaluate":
        found = {"taskdml.metrics"}
    elif step.kind == "predict":  # a method name: the code that applies it
        found = {"taskdml.runs"}
    else:
        found = {step.target.partition(":")[0]}
    for value in _strings(spec):
        if _NAMED_CALLABLE.match(value):
            found.add(value.partition(":")[0])
    return sorted(found)


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def fingerprint(module):
    """What stands for the code of *module* in a key.

    Parameters
    ----------
    module : str
        A dotted module name.

    Returns
    -------
    str
        ``"<distribution>==<version>"`` for a module installed as a library, else
        ``"sha256:<digest>"`` of its source file (of every ``.py`` file under it for a
        package).

    Raises
    ------
    _NoKey
        When the module cannot be found.
    """
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as error:
        raise _NoKey(f"module {module} cannot be found ({error})") from None
    if spec is None:
        raise _NoKey(f"module {module} cannot be found")
    origin = spec.origin if spec.has_location else None
    if origin is None:  # built into the interpreter
        return f"python=={sys.version.split()[0]}"
    if _installed(origin):
        distributions = _distributions().get(module.split(".")[0])
        if distributions:
            name = distributions[0]
            return f"{name}=={importlib.metadata.version(name)}"
    # A package is its whole folder: the functions a file names through it (taskdml.datasets,
    # a user's package) live in its submodules.
    files = (
        sorted(Path(origin).parent.rglob("*.py"))
        if os.path.basename(origin) == "__init__.py"
        else [Path(origin)]
    )
    digest = hashlib.sha256()
    try:
        for path in files:
            digest.update(path.relative_to(Path(origin).parent).as_posix().encode())
            digest.update(path.read_bytes())
    except OSError as error:
        raise _NoKey(f"the source of {module} cannot be read ({error})") from None
    return "sha256:" + digest.hexdigest()[:16]


@functools.cache
def _library_folders():
    paths = sysconfig.get_paths()
    return tuple({os.path.realpath(paths[name]) for name in ("purelib", "platlib", "stdlib")})


def _installed(origin):
    origin = os.path.realpath(origin)
    return any(origin.startswith(folder + os.sep) for folder in _library_folders())


@functools.cache
def _distributions():
    return importlib.metadata.packages_distributions()


def _files(spec):
    """``{path: fingerprint}`` of the paths named among the step's arguments."""
    found = {}
    for value in _strings({k: spec.get(k) for k in ("with", "foreach", "model")}):
        if "\n" in value or len(value) > 1024 or not value.strip():
            continue
        stats = _stats(value)
        if stats:
            digest = hashlib.sha256(json.dumps(stats, sort_keys=True).encode()).hexdigest()
            found[value] = digest[:16]
    return found


def _stats(value):
    """``[(path, size, modified)]`` of the files *value* names, or ``[]``."""
    if "://" in value:
        return _remote_stats(value)
    if any(char in value for char in "*?["):
        paths = sorted(glob.glob(value, recursive=True))[:_MOST_FILES]
    elif os.path.isdir(value):
        paths = sorted(_walk(value))
    elif os.path.isfile(value):
        paths = [value]
    else:
        return []
    stats = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            continue
        stats.append((path, info.st_size, info.st_mtime_ns))
    return stats


def _walk(folder):
    count = 0
    for root, _, names in os.walk(folder):
        for name in names:
            yield os.path.join(root, name)
            count += 1
            if count >= _MOST_FILES:
                return


def _remote_stats(url):
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(url)
        infos = fs.find(path, detail=True) if fs.isdir(path) else {path: fs.info(path)}
    except Exception:  # not a path (a connection string, an address): nothing to fingerprint
        return []
    changed = ("mtime", "LastModified", "last_modified", "ETag", "etag", "md5", "generation")
    return [
        (name, info.get("size"), *[str(info[key]) for key in changed if key in info])
        for name, info in sorted(infos.items())[:_MOST_FILES]
    ]


def explain(now, last):
    """Why a step ran: how its parts differ from those of its last run.

    Parameters
    ----------
    now : dict
        The step's parts in this run.
    last : dict or None
        Its parts when it last ran (``None``: never, in this cache).

    Returns
    -------
    list of str
        One reason per change (``"with.alpha changed 0.0001 -> 0.001"``, ``"input scale
        re-ran"``, ``"code of myproject.features changed"``, ``"file data.csv changed"``); empty
        when nothing changed.
    """
    if last is None:
        return ["first run of this step with this cache"]
    reasons = []
    if last.get("format") != now["format"]:
        reasons.append("the cache's format changed")
    old, new = _flat(last.get("spec", {})), _flat(now["spec"])
    for path in sorted(set(old) | set(new)):
        if old.get(path, _ABSENT) != new.get(path, _ABSENT):
            reasons.append(_change(path, old.get(path, _ABSENT), new.get(path, _ABSENT)))
    for where, ref in now["inputs"].items():
        before = last.get("inputs", {}).get(where)
        if before is None or before["key"] != ref["key"]:
            reasons.append(f"input {ref['step']} re-ran")
    for module, print_ in now["code"].items():
        before = last.get("code", {}).get(module)
        if before is not None and before != print_:
            versions = f" ({before} -> {print_})" if "==" in print_ and "==" in before else ""
            reasons.append(f"code of {module} changed{versions}")
    for path, print_ in now["files"].items():
        if last.get("files", {}).get(path) != print_:
            reasons.append(f"file {path} changed")
    return list(dict.fromkeys(reasons))  # an input read twice re-ran once


_ABSENT = object()


def _flat(value, prefix=""):
    if isinstance(value, dict) and value:
        flat = {}
        for key, item in value.items():
            flat.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def _change(path, old, new):
    if old is _ABSENT:
        return f"{path} set to {new!r}"
    if new is _ABSENT:
        return f"{path} removed (was {old!r})"
    return f"{path} changed {old!r} -> {new!r}"
