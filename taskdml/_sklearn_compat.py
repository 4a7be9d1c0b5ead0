"""Every private scikit-learn name taskdml uses, in one place.

The merge rules read and write estimators' whole learned state, and some of that state is
built by scikit-learn helpers that are not public. Importing them here alone means a
scikit-learn release that moves one breaks this file, not the modules that use it. No version
branches: ``pyproject.toml`` pins the supported range, and this module follows its newest
release. :func:`relink_birch_views` is the one repair of a private structure that taskdml needs.
"""

from sklearn.decomposition._online_lda_fast import _dirichlet_expectation_2d
from sklearn.linear_model._stochastic_gradient import BaseSGDClassifier, BaseSGDRegressor
from sklearn.neural_network._stochastic_optimizers import AdamOptimizer, SGDOptimizer
from sklearn.preprocessing._data import _handle_zeros_in_scale, _is_constant_feature
from sklearn.utils import _safe_indexing
from sklearn.utils._openmp_helpers import _openmp_effective_n_threads
from sklearn.utils._repr_html.estimator import _VisualBlock
from sklearn.utils.multiclass import _check_partial_fit_first_call
from sklearn.utils.validation import _check_sample_weight, _is_arraylike_not_scalar, _num_samples

__all__ = [
    "AdamOptimizer",
    "BaseSGDClassifier",
    "BaseSGDRegressor",
    "SGDOptimizer",
    "_check_partial_fit_first_call",
    "_check_sample_weight",
    "_dirichlet_expectation_2d",
    "_handle_zeros_in_scale",
    "_is_arraylike_not_scalar",
    "_is_constant_feature",
    "_num_samples",
    "_openmp_effective_n_threads",
    "_safe_indexing",
    "_VisualBlock",
    "relink_birch_views",
    "scorer_accepts_sample_weight",
]


def scorer_accepts_sample_weight(scorer):
    """Whether *scorer* (a scikit-learn scorer or a plain callable) takes ``sample_weight``."""
    import inspect

    if hasattr(scorer, "_accept_sample_weight"):
        return scorer._accept_sample_weight()
    return "sample_weight" in inspect.signature(scorer).parameters


def relink_birch_views(estimator):
    """Restore the views a copied or unpickled ``Birch`` lost; return *estimator*.

    Each node of Birch's CF tree keeps ``centroids_`` and ``squared_norm_`` as views of
    ``init_centroids_`` and ``init_sq_norm_`` and updates only the latter in place. A deep copy
    or a pickle round trip (every hop of a chain of tasks) turns the views into independent
    arrays, and the next ``partial_fit`` then searches the tree with stale centroids. Any other
    estimator is returned untouched.
    """
    from sklearn.cluster import Birch

    if not isinstance(estimator, Birch) or not hasattr(estimator, "root_"):
        return estimator
    nodes, seen = [estimator.root_], set()
    while nodes:
        node = nodes.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        n_subclusters = len(node.subclusters_)
        node.centroids_ = node.init_centroids_[:n_subclusters]
        node.squared_norm_ = node.init_sq_norm_[:n_subclusters]
        nodes.extend(sub.child_ for sub in node.subclusters_ if sub.child_ is not None)
    return estimator
