"""User functions that test pipelines call as tasks (a stand-in for a user's own module)."""

import time


def wait_and_return(value, seconds=0.0):
    """Sleep, then return *value*: a task whose timing tests can observe."""
    time.sleep(seconds)
    return value


def add(a, b):
    return a + b


def pair(value):
    """Return two outputs."""
    return value, value * 2


def fail(message="boom"):
    raise RuntimeError(message)


def count_samples(data):
    """Receives an in-memory dataset, as plain callables do."""
    return int(data.sizes["sample"])
