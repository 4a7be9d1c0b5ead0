"""Safe YAML loading that remembers where every key and item came from.

The pipeline file is composed with PyYAML's ``SafeLoader`` (no Python tags) and turned into
plain dicts, lists and scalars by hand, so that each value's key path maps to the line and
column of the file where it was written. Errors later point there. Two departures from
PyYAML's YAML 1.1 defaults: ``1e-3`` is a float (as in YAML 1.2 and every other tool), and a
duplicated mapping key is an error instead of silently keeping the last one.

A pipeline file may come from anyone, so loading it is bounded before anything is built from
it. While the document is composed, each collection node records how many values it stands
for and how deep it nests once its aliases are expanded; an alias adds its anchor's count.
Loading stops, at the line and column where a bound is crossed, when the file nests more than
:data:`MAX_DEPTH` levels (which would otherwise end in a ``RecursionError``) or when aliases
expand it by more than :data:`MAX_ALIAS_VALUES` values (a "billion laughs" file of a few
hundred bytes stands for billions), and an alias inside its own anchor is refused. Composing
keeps aliases shared, so the bounds are checked in time and memory linear in the file.
"""

import re

import yaml

from taskdml.exceptions import PipelineError, dotted


class Location(tuple):
    """``(source, line, column)`` of a value, 1-based; prints as ``source:line:column``."""

    def __new__(cls, source, line, column):
        return super().__new__(cls, (source, line, column))

    def __str__(self):
        source, line, column = self
        return f"{source}:{line}:{column}" if line else str(source)


MAX_DEPTH = 100
"""Levels of nested mappings and lists a pipeline file may have, aliases expanded."""

MAX_ALIAS_VALUES = 100_000
"""Values aliases may add to a pipeline file once expanded."""


class LimitError(yaml.MarkedYAMLError):
    """A bound of :class:`_Loader` was crossed; ``problem_mark`` says where."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads YAML 1.2 floats such as ``1e-3``, and bounds what a document
    may expand to (see the module docstring)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._path, self._open, self._extent, self._aliased = [], set(), {}, 0

    def compose_node(self, parent, index):
        part = _part(parent, index)
        if part is not None:
            self._path.append(part)
        try:
            return self._compose_bounded(parent, index)
        finally:
            if part is not None:
                self._path.pop()

    def _compose_bounded(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            return self._alias(event, parent, index)
        if isinstance(event, yaml.ScalarEvent):
            return super().compose_node(parent, index)
        if len(self._path) + 1 > MAX_DEPTH:
            raise LimitError(
                problem=f"{_shown(self._path)}: the file nests mappings and lists more than "
                f"{MAX_DEPTH} levels deep. A pipeline file is settings, not data: flatten this "
                "value, or keep deep data in a file that a step reads",
                problem_mark=event.start_mark,
            )
        if event.anchor is not None:
            self._open.add(event.anchor)
        node = super().compose_node(parent, index)
        self._open.discard(event.anchor)
        children = (
            [child for pair in node.value for child in pair]
            if isinstance(node, yaml.MappingNode)
            else node.value
        )
        extents = [self._extent.get(child, (1, 0)) for child in children]
        self._extent[node] = (
            1 + sum(count for count, _ in extents),
            1 + max((height for _, height in extents), default=0),
        )
        return node

    def _alias(self, event, parent, index):
        if event.anchor in self._open:
            raise LimitError(
                problem=f"{_shown(self._path)}: alias *{event.anchor} is inside its own anchor "
                f"&{event.anchor}, which would make an endless value. Point the alias at a "
                "value outside the anchored one",
                problem_mark=event.start_mark,
            )
        node = super().compose_node(parent, index)  # an undefined alias raises here
        count, height = self._extent.get(node, (1, 0))
        self._aliased += count
        if len(self._path) + height > MAX_DEPTH:
            raise LimitError(
                problem=f"{_shown(self._path)}: alias *{event.anchor} makes the file nest "
                f"mappings and lists more than {MAX_DEPTH} levels deep ({len(self._path)} "
                f"here, {height} in &{event.anchor}). Flatten the anchored value or write it "
                "out where it is needed",
                problem_mark=event.start_mark,
            )
        if self._aliased > MAX_ALIAS_VALUES:
            raise LimitError(
                problem=f"{_shown(self._path)}: aliases expand the file by more than "
                f"{MAX_ALIAS_VALUES:,} values (*{event.anchor} stands for {count:,}), the way "
                "a 'billion laughs' file exhausts memory. Use fewer or smaller aliases, or "
                "write the values out",
                problem_mark=event.start_mark,
            )
        return node


def _part(parent, index):
    """The key path part of the node composed as *index* of *parent*."""
    if isinstance(parent, yaml.SequenceNode):
        return index
    if isinstance(parent, yaml.MappingNode):
        return index.value if isinstance(index, yaml.ScalarNode) else "<key>"
    return None


def _shown(path):
    """A key path for a message, its middle elided when it is long."""
    if len(path) <= 6:
        return dotted(tuple(path))
    return f"{dotted(tuple(path[:3]))}...{dotted(tuple(path[-2:]))}"


_FLOAT_12 = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789"))


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes the strings :class:`_Loader` would read as floats (``'1e3'``)."""


_Dumper.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789"))

_PLAIN_TAGS = {
    "tag:yaml.org,2002:" + name
    for name in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp")
}


def load_with_locations(text, source="<string>"):
    """Parse YAML *text*; return ``(data, locations)``.

    Parameters
    ----------
    text : str
        YAML text, loaded safely (no Python tags).
    source : str, default ``"<string>"``
        The file name locations carry.

    Returns
    -------
    data : object
        The parsed document.
    locations : dict
        Each key path (a tuple of keys and list indices) to its :class:`Location`.

    Raises
    ------
    PipelineError
        For invalid YAML, Python tags and duplicated keys, and for a document that nests more
        than :data:`MAX_DEPTH` levels or whose aliases add more than :data:`MAX_ALIAS_VALUES`
        values.
    """
    loader = _Loader(text)
    locations = {}
    try:
        root = loader.get_single_node()
        data = None if root is None else _to_python(root, (), loader, source, locations)
    except LimitError as error:
        mark = error.problem_mark
        raise PipelineError(
            f"{Location(source, mark.line + 1, mark.column + 1)}: {error.problem}."
        ) from None
    except yaml.YAMLError as error:  # the syntax, or a node no safe constructor builds
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        where = Location(source, mark.line + 1, mark.column + 1) if mark else Location(source, 0, 0)
        problem = getattr(error, "problem", None) or str(error)
        raise PipelineError(
            f"{where}: the file is not valid YAML: {problem}. Fix the syntax at that position "
            "(check indentation, colons and quotes)."
        ) from None
    finally:
        loader.dispose()
    return data, locations


def _location(node, source):
    return Location(source, node.start_mark.line + 1, node.start_mark.column + 1)


def _to_python(node, path, loader, source, locations):
    locations.setdefault(path, _location(node, source))
    if node.tag not in _PLAIN_TAGS:
        raise PipelineError(
            f"{_location(node, source)}: {dotted(path)}: YAML tag {node.tag!r} is not allowed; "
            "pipeline files are loaded safely. Write a plain value and name callables as "
            "'module:attr' strings."
        )
    if isinstance(node, yaml.MappingNode):
        written = sum(key.tag != "tag:yaml.org,2002:merge" for key, _ in node.value)
        loader.flatten_mapping(node)  # merged pairs (<<: *anchor) first, then those written
        merged = len(node.value) - written
        chosen = {}
        for position, (key_node, value_node) in enumerate(node.value):
            key = _scalar(key_node, path, loader, source)
            if not isinstance(key, (str, int, float, bool)):
                raise PipelineError(
                    f"{_location(key_node, source)}: {dotted(path)}: a mapping key must be a "
                    f"plain scalar, found {key!r}."
                )
            if position >= merged and chosen.get(key, (-1,))[0] >= merged:
                raise PipelineError(
                    f"{_location(key_node, source)}: {dotted(path + (key,))}: key {key!r} is "
                    "given twice. Remove one of them."
                )
            chosen[key] = (position, key_node, value_node)  # a later pair overrides a merged one
        result = {}
        for key, (_, key_node, value_node) in chosen.items():
            locations[path + (key,)] = _location(key_node, source)
            result[key] = _to_python(value_node, path + (key,), loader, source, locations)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [
            _to_python(item, path + (index,), loader, source, locations)
            for index, item in enumerate(node.value)
        ]
    return _scalar(node, path, loader, source)


def _scalar(node, path, loader, source):
    """Construct a scalar node; a value its tag cannot hold is a located error, not a crash."""
    try:
        value = loader.construct_object(node)
        if type(value) is int:
            str(value)  # an integer Python cannot print (0x and 5,000 digits) breaks every record
        return value
    except (ValueError, OverflowError) as error:  # 2020-02-30, an integer of 5,000 digits
        shown = node.value if len(node.value) <= 40 else node.value[:37] + "..."
        kind = _KINDS.get(node.tag.rpartition(":")[2], "a value of its tag")
        why = "it has too many digits" if kind == _KINDS["int"] else str(error)
        raise PipelineError(
            f"{_location(node, source)}: {dotted(path)}: {shown!r} reads as {kind} but is not "
            f"a usable one ({why}). Quote it to keep it as a string, or correct it."
        ) from None


_KINDS = {"int": "an integer", "float": "a number", "timestamp": "a date", "bool": "a boolean"}


def dump(data):
    """YAML text that :func:`load_with_locations` reads back as *data* (plain values).

    Examples
    --------
    >>> dump({"tag": "1e3", "alpha": 1e-3})
    "tag: '1e3'\\nalpha: 0.001\\n"
    """
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def parse_scalar(text):
    """Parse one value written on the command line the way the file would parse it.

    Parameters
    ----------
    text : str

    Returns
    -------
    object
        The YAML scalar or collection *text* denotes, or *text* itself when it is not YAML.

    Examples
    --------
    >>> parse_scalar("1e-3"), parse_scalar("[1, 2]"), parse_scalar("a: b: c")
    (0.001, [1, 2], 'a: b: c')
    """
    try:
        value = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError:
        return text
    return (
        text if value is None and text.strip() not in ("", "null", "~", "Null", "NULL") else value
    )
