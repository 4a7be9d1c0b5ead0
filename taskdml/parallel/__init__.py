"""The data-parallel engine. Importing the package registers the built-in merge rules, so a
worker that unpickles any engine function knows them too."""

from taskdml.parallel import merge  # noqa: F401  (registers the built-in rules)
