"""The path pipeline files before 0.2 named (``taskdml.text:...``); deprecated, removed in 0.3.

Name the functions through :mod:`taskdml.datasets` instead (``taskdml.datasets:...``).
"""

import warnings

from taskdml.datasets.text import TOPICS, hash_text, make_documents  # noqa: F401

warnings.warn(
    "taskdml.text is deprecated; name its functions through taskdml.datasets "
    "(e.g. 'taskdml.datasets:hash_text')",
    DeprecationWarning,
    stacklevel=2,
)
