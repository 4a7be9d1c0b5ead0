"""The path pipeline files before 0.2 named (``taskdml.silos:...``); deprecated, removed in 0.3.

Name the functions through :mod:`taskdml.datasets` instead (``taskdml.datasets:...``).
"""

import warnings

from taskdml.datasets.silos import SKEWS, load_held_out, load_silo  # noqa: F401

warnings.warn(
    "taskdml.silos is deprecated; name its functions through taskdml.datasets "
    "(e.g. 'taskdml.datasets:load_silo')",
    DeprecationWarning,
    stacklevel=2,
)
