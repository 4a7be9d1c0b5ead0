"""Safe YAML loading that remembers where every key and item came from.

The pipeline file is composed with PyYAML's ``SafeLoader`` (no Python tags) and turned into
plain dicts, lists and scalars by hand, so that each value's key path maps to the line and
column of the file where it was written. Errors later point there. Two departures from
PyYAML's YAML 1.1 defaults: ``1e-3`` is a float (as in YAML 1.2 and every other tool), and a
duplicated mapping key is an error instead of silently keeping the last one.
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


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads YAML 1.2 floats such as ``1e-3``."""


_FLOAT_12 = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789"))

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
        For invalid YAML, Python tags and duplicated keys.
    """
    loader = _Loader(text)
    locations = {}
    try:
        root = loader.get_single_node()
        data = None if root is None else _to_python(root, (), loader, source, locations)
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
        loader.flatten_mapping(node)
        result = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node)
            if not isinstance(key, (str, int, float, bool)):
                raise PipelineError(
                    f"{_location(key_node, source)}: {dotted(path)}: a mapping key must be a "
                    f"plain scalar, found {key!r}."
                )
            if key in result:
                raise PipelineError(
                    f"{_location(key_node, source)}: {dotted(path + (key,))}: key {key!r} is "
                    "given twice. Remove one of them."
                )
            locations[path + (key,)] = _location(key_node, source)
            result[key] = _to_python(value_node, path + (key,), loader, source, locations)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [
            _to_python(item, path + (index,), loader, source, locations)
            for index, item in enumerate(node.value)
        ]
    return loader.construct_object(node)


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
