"""Search spaces: lists (a grid) and distributions, in Python and in pipeline files.

In Python a space is what scikit-learn's searches take: a dict of parameter name to a list of
values or a ``scipy.stats`` distribution (anything with ``rvs``), or a list of such dicts for
conditional spaces (each dict is one branch: ``[{"penalty": ["l2"]}, {"penalty":
["elasticnet"], "l1_ratio": uniform(0, 1)}]``). In a pipeline file a distribution is written
as a one-key mapping:

==========================  ==============================================
``{uniform: [low, high]}``  ``scipy.stats.uniform(low, high - low)``
``{loguniform: [low, high]}``  ``scipy.stats.loguniform(low, high)``
``{randint: [low, high]}``  ``scipy.stats.randint(low, high)`` (high excluded)
``{choice: [a, b, c]}``     a uniform choice, the same as the list ``[a, b, c]``
==========================  ==============================================

Sampling goes through scikit-learn's ``ParameterSampler`` with a seeded generator, so a
space and a seed give the same candidates everywhere.
"""

import numbers

import numpy as np

from taskdml.exceptions import PipelineError, did_you_mean

DISTRIBUTIONS = ("uniform", "loguniform", "randint", "choice")


def from_spec(space):
    """Turn a pipeline file's ``space`` (dict or list of dicts) into a Python space.

    Parameters
    ----------
    space : dict or list of dicts
        Parameter names to lists of values, single values or one-key distribution mappings
        (see the module docstring).

    Returns
    -------
    dict or list of dicts
        Lists and ``scipy.stats`` distributions, as scikit-learn's searches take.

    Raises
    ------
    PipelineError
        An unknown distribution, or bounds that are not ``[low, high]`` with ``low < high``.

    Examples
    --------
    >>> from taskdml.model_selection._space import from_spec
    >>> space = from_spec({"alpha": {"loguniform": [1e-4, 1e-1]}, "penalty": ["l2", "l1"]})
    >>> space["alpha"].dist.name, space["penalty"]
    ('loguniform', ['l2', 'l1'])
    """
    if isinstance(space, (list, tuple)):
        return [_branch(dict(branch)) for branch in space]
    return _branch(dict(space))


def _branch(branch):
    return {name: _values(name, value) for name, value in branch.items()}


def _values(name, value):
    from scipy import stats

    if isinstance(value, (list, tuple)):
        return list(value)
    if not (isinstance(value, dict) and len(value) == 1):
        return [value]
    kind, arguments = next(iter(value.items()))
    if kind not in DISTRIBUTIONS:
        raise PipelineError(
            f"space.{name}: unknown distribution {kind!r}.{did_you_mean(kind, DISTRIBUTIONS)} "
            f"Write one of {', '.join(DISTRIBUTIONS)}, or a list of values."
        )
    if kind == "choice":
        return list(arguments)
    if not (
        isinstance(arguments, (list, tuple))
        and len(arguments) == 2
        and all(isinstance(a, numbers.Real) for a in arguments)
        and arguments[0] < arguments[1]
    ):
        raise PipelineError(
            f"space.{name}: {kind} takes [low, high] with low < high, found {arguments!r}."
        )
    low, high = arguments
    if kind == "uniform":
        return stats.uniform(low, high - low)
    if kind == "loguniform":
        if low <= 0:
            raise PipelineError(f"space.{name}: loguniform needs low > 0, found {low!r}.")
        return stats.loguniform(low, high)
    return stats.randint(int(low), int(high))


def is_grid(space):
    """Whether every value of the space is a list (so it can be enumerated).

    Parameters
    ----------
    space : dict or list of dicts

    Returns
    -------
    bool
    """
    branches = space if isinstance(space, list) else [space]
    return all(
        isinstance(values, (list, tuple, np.ndarray))
        for branch in branches
        for values in branch.values()
    )


def candidates(space, n_candidates=None, random_state=None):
    """The candidates of a space: every grid point, or *n_candidates* seeded samples.

    Parameters
    ----------
    space : dict or list of dicts
        Lists of values and ``scipy.stats`` distributions.
    n_candidates : int, optional
        How many to sample with scikit-learn's ``ParameterSampler``; ``None`` enumerates the
        grid (every value must then be a list).
    random_state : int, RandomState or None
        Seeds the sampling.

    Returns
    -------
    list of dict

    Examples
    --------
    >>> from taskdml.model_selection._space import candidates
    >>> candidates({"C": [1, 10], "kernel": ["rbf"]})
    [{'C': 1, 'kernel': 'rbf'}, {'C': 10, 'kernel': 'rbf'}]
    """
    from sklearn.model_selection import ParameterGrid, ParameterSampler

    if n_candidates is None:
        if not is_grid(space):
            raise ValueError("a space with distributions needs a number of candidates to sample.")
        return list(ParameterGrid(space))
    return list(ParameterSampler(space, n_candidates, random_state=random_state))
