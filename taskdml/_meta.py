"""What taskdml's meta-estimators take from the estimator they wrap: tags and methods.

:func:`wrapped_tags` copies the wrapped estimator's kind into the meta-estimator's tags, and
:func:`estimator_has` makes a delegating method exist only when the wrapped estimator has it
(for scikit-learn's ``available_if``), as scikit-learn's own meta-estimators do.
"""

import copy


def wrapped_tags(tags, estimator, *, target=True):
    """*tags* (the meta-estimator's own) with the wrapped *estimator*'s kind copied in:
    classifier, regressor or transformer, with their sub-tags and, with *target*, its target
    tags (scikit-learn's searches keep their own, so taskdml's drop-in searches do too)."""
    from sklearn.utils import get_tags

    inner = get_tags(estimator)
    tags.estimator_type = inner.estimator_type
    if target:
        tags.target_tags = copy.deepcopy(inner.target_tags)
    tags.classifier_tags = copy.deepcopy(inner.classifier_tags)
    tags.regressor_tags = copy.deepcopy(inner.regressor_tags)
    tags.transformer_tags = copy.deepcopy(inner.transformer_tags)
    return tags


def estimator_has(attribute, fitted_attr, *, precheck=None):
    """A check for ``available_if``: the wrapped estimator has *attribute*.

    The fitted estimator (the meta-estimator's *fitted_attr*, e.g. ``"estimator_"`` or
    ``"best_estimator_"``) is asked once there is one, else the unfitted ``estimator``.

    Parameters
    ----------
    attribute : str
        The method or attribute the delegating method needs.
    fitted_attr : str
        The meta-estimator's attribute holding the fitted estimator.
    precheck : callable, optional
        ``precheck(meta_estimator, attribute)``, called first; it raises ``AttributeError``
        to make the method unavailable for a reason of its own (a search with ``refit=False``).

    Returns
    -------
    callable
        ``check(meta_estimator)``: ``True``, or raises the ``AttributeError`` that says what is
        missing.

    Examples
    --------
    >>> from sklearn.linear_model import LinearRegression
    >>> from taskdml._meta import estimator_has
    >>> class Wrapper:
    ...     def __init__(self, estimator):
    ...         self.estimator = estimator
    >>> estimator_has("predict", "estimator_")(Wrapper(LinearRegression()))
    True
    """

    def check(meta_estimator):
        if precheck is not None:
            precheck(meta_estimator, attribute)
        if hasattr(meta_estimator, fitted_attr):
            estimator = getattr(meta_estimator, fitted_attr)
        else:
            estimator = meta_estimator.estimator
        getattr(estimator, attribute)  # raises AttributeError naming what is missing
        return True

    return check
