"""What every search shares: the refitted best estimator answers for the search.

:class:`SearchBase` is the base of the grid searches (:mod:`taskdml.model_selection.grid._search`)
and of the adaptive ones (:mod:`taskdml.model_selection.adaptive._search`). It holds the methods
that delegate to ``best_estimator_`` — ``predict``, ``predict_proba``,
``predict_log_proba``, ``decision_function``, ``transform``, ``inverse_transform``,
``score_samples`` and ``classes_`` — each offered (``available_if``) only when the wrapped
estimator has it (:func:`taskdml._meta.estimator_has`). On chunked data both kinds score
the best estimator with :func:`taskdml.metrics.score_chunked`.

A subclass chooses three things:

- ``_refit_gates_methods``: with ``True`` (the grid searches, as scikit-learn's) a search
  built with ``refit=False`` has no ``predict`` at all; with ``False`` (the adaptive ones) it
  has one that raises an ``AttributeError`` saying why.
- :meth:`SearchBase._no_refit_message`: that error's text.
- :meth:`SearchBase._apply_best`: how a method is applied to the data; the adaptive searches
  apply it chunk by chunk to dask and xarray input.
"""

from sklearn.base import BaseEstimator, MetaEstimatorMixin
from sklearn.utils.metaestimators import available_if

from taskdml._meta import estimator_has

__all__ = ["SearchBase"]


def engine_options(search, from_parallel):
    """The engine's options of *search*: its parameters (the options table's, for
    ``search._taker``), or what the deprecated ``parallel=`` dict says, checked by the table.

    Parameters
    ----------
    search : SearchBase
    from_parallel : callable
        ``dict -> dict``: the options a ``parallel`` dict stood for (the adaptive searches
        trained with ``"sync"`` when a dict was given).

    Returns
    -------
    dict
        ``{option: value}`` for every option the search takes.
    """
    import warnings

    from taskdml.parallel.engine import _options

    name, taker = type(search).__name__, search._taker
    values = {option: getattr(search, option) for option in _options.names(taker)}
    parallel = search.parallel
    if not (isinstance(parallel, str) and parallel == "deprecated"):
        warnings.warn(
            f"{name}(parallel=...) is deprecated since taskdml 0.2 and will be removed in 0.3: "
            f"pass its keys as parameters ({name}(strategy='sync', sync_every=2)), which "
            "get_params, set_params and clone reach.",
            FutureWarning,
            stacklevel=4,
        )
        if parallel is not None:
            if not isinstance(parallel, dict):
                raise ValueError(
                    f"{name}: parallel must be None or a dict such as "
                    f"{{'strategy': 'sync', 'sync_every': 1}}, got {parallel!r}."
                )
            given = from_parallel(dict(parallel))
            _options.check_keys(taker, given, name)
            values.update(given)
    return _options.check(taker, values, name)


def _refit_precheck(search, attribute):
    """Where the class says so (``_refit_gates_methods``), no refit means nothing to delegate to."""
    if search._refit_gates_methods and not search.refit:
        raise AttributeError(search._no_refit_message(attribute))


def best_has(attribute):
    """``available_if`` check: the refitted best estimator (before fit: the estimator) has it."""
    return estimator_has(attribute, "best_estimator_", precheck=_refit_precheck)


class SearchBase(MetaEstimatorMixin, BaseEstimator):
    """Base of taskdml's searches: delegation to the refitted best estimator.

    Not for direct use; see :class:`~taskdml.model_selection.GridSearchCV` and
    :class:`~taskdml.model_selection.ASHASearchCV`.
    """

    _refit_gates_methods = True
    _taker = "search"
    """The entry point of the engine's options table whose options the search takes."""

    def _no_refit_message(self, attribute):
        """Why *attribute* is missing from a search built with ``refit=False``."""
        return (
            f"This {type(self).__name__} instance was initialized with `refit=False`. "
            f"{attribute} is available only after refitting on the best parameters. You can "
            "refit an estimator manually using the `best_params_` attribute"
        )

    def _refitted(self, attribute):
        """``best_estimator_``, once fitted with refit; else the error that says why not."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        if not self.refit:
            raise AttributeError(self._no_refit_message(attribute))
        return self.best_estimator_

    def _apply_best(self, estimator, method, X):
        """``estimator.method(X)``: how the search applies the best estimator to *X*."""
        return getattr(estimator, method)(X)

    def _delegate(self, method, X):
        return self._apply_best(self._refitted(method), method, X)

    @available_if(best_has("score_samples"))
    def score_samples(self, X):
        """Call ``score_samples`` on the estimator with the best found parameters.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        scores : ndarray of shape (n_samples,)
        """
        return self._delegate("score_samples", X)

    @available_if(best_has("predict"))
    def predict(self, X):
        """Call ``predict`` on the estimator with the best found parameters.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        return self._delegate("predict", X)

    @available_if(best_has("predict_proba"))
    def predict_proba(self, X):
        """Call ``predict_proba`` on the estimator with the best found parameters.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        return self._delegate("predict_proba", X)

    @available_if(best_has("predict_log_proba"))
    def predict_log_proba(self, X):
        """Call ``predict_log_proba`` on the estimator with the best found parameters.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        log_proba : ndarray of shape (n_samples, n_classes)
        """
        return self._delegate("predict_log_proba", X)

    @available_if(best_has("decision_function"))
    def decision_function(self, X):
        """Call ``decision_function`` on the estimator with the best found parameters.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        scores : ndarray of shape (n_samples,) or (n_samples, n_classes)
        """
        return self._delegate("decision_function", X)

    @available_if(best_has("transform"))
    def transform(self, X):
        """Call ``transform`` on the estimator with the best found parameters.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        X_new : array-like of shape (n_samples, n_components)
        """
        return self._delegate("transform", X)

    @available_if(best_has("inverse_transform"))
    def inverse_transform(self, X):
        """Call ``inverse_transform`` on the estimator with the best found parameters.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_components)

        Returns
        -------
        X_original : array-like of shape (n_samples, n_features)
        """
        return self._delegate("inverse_transform", X)

    @property
    def classes_(self):
        """Class labels of the refitted best estimator (classifiers, with ``refit``)."""
        if self._refit_gates_methods:
            best_has("classes_")(self)
        return self._refitted("classes_").classes_
