"""Every public function, class and method documents itself the numpydoc way."""

import importlib
import inspect
import re

import pytest

PUBLIC_MODULES = [
    "taskdml",
    "taskdml.parallel",
    "taskdml.model_selection",
    "taskdml.graph",
    "taskdml.datasets",
    "taskdml.metrics",
    "taskdml.testing",
    "taskdml.runs._directory",
    "taskdml.pipeline._spec",
    "taskdml.cluster._connect",
    "taskdml.pipeline._render",
    "taskdml.runs._pictures",
    "taskdml.runs._report",
]
SECTION = re.compile(r"^(Parameters|Returns|Yields|Raises|Examples|Attributes)\n-{3,}$", re.M)


def _public_objects():
    """``(dotted name, object)`` for the public API: exported functions and classes (not
    exceptions, whose one line says what they mean) and the public methods of those classes."""
    seen = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None) or [
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and getattr(value, "__module__", None) == module_name
        ]
        for name in names:
            value = getattr(module, name)
            if not (inspect.isfunction(value) or inspect.isclass(value)):
                continue
            if inspect.isclass(value) and issubclass(value, BaseException):
                continue
            seen.setdefault(id(value), (f"{module_name}.{name}", value))
            if inspect.isclass(value):
                for method_name, method in vars(value).items():
                    if not method_name.startswith("_") and inspect.isfunction(method):
                        seen.setdefault(id(method), (f"{module_name}.{name}.{method_name}", method))
    return sorted(seen.values(), key=lambda item: item[0])


PUBLIC_OBJECTS = _public_objects()


@pytest.mark.parametrize("name, obj", PUBLIC_OBJECTS, ids=[name for name, _ in PUBLIC_OBJECTS])
def test_public_object_has_numpydoc_sections(name, obj):
    """The docstring has at least one numpydoc section (Parameters, Returns, Examples, ...)."""
    assert SECTION.search(inspect.getdoc(obj) or ""), f"{name} has no numpydoc section"
