"""Merge rules: how replicas trained data-parallel become one estimator again.

In a synchronous round the global estimator is copied to K workers, each copy runs
``partial_fit`` on different chunks, and the K replicas are merged into the next global
estimator. A *merge rule* does the last step for one estimator family; it reads and writes
the estimator's whole learned state, private parts included (copying the attributes that
end in ``_`` is not enough: the averaged-SGD buffers, the MLP optimiser and the k-means
counts are private).

The engine makes two calls, both pure functions of their inputs:

- :func:`prepare_start` once before round 1, on the first chunk: it draws random
  initialisations once (MLP weights, k-means centres, LDA topics, ...) so that replicas
  start from the same point -- averaging independently initialised models is meaningless --
  and it records where the round starts;
- :func:`merge_replicas` after each round, with one weight per replica (the rows it saw).
  Its result is broadcast unchanged to start the next round.

Rules are looked up along the estimator's MRO (:func:`get_merge_rule`); estimators that
cannot be merged say why (:func:`unmergeable_reason`) and the engine falls back to a
sequential pass. Exact rules (naive Bayes, scalers, IncrementalPCA) equal one ``partial_fit``
pass over all the data (IncrementalPCA's replicas keep every component, and the estimator
handed back is truncated once to ``n_components``: batch PCA of all the rows); the others
(SGD, MLP, k-means, LDA, ...) are model averaging, with the schedule counters (``t_``,
Adam's step, ``n_batch_iter_``, ``n_steps_``) made global so a run continues where a serial
one would be.
:func:`taskdml.testing.check_merge` checks a rule, built-in or user-registered. A rule may
also state the smallest batch its estimator accepts (``min_rows``: IncrementalPCA's
``n_features``, MiniBatchKMeans' ``n_clusters``, an MLP's integer ``batch_size``); the
engine merges smaller chunks into blocks that hold it (:mod:`taskdml.parallel.engine._blocks`),
and the mini-batch its ``fit`` steps by (``batch_rows``: MiniBatchKMeans, MiniBatchNMF,
MiniBatchDictionaryLearning and BernoulliRBM, whose ``partial_fit`` takes all it is given as
one mini-batch); the engine feeds each block in slices of that size.

=============================  =========  ================================================
estimator                      exact      rule
=============================  =========  ================================================
SGDClassifier, Perceptron,     no         rows-seen average of coef_/intercept_, global
SGDRegressor, SGDOneClassSVM,             t_, ASGD buffers pooled over the round's
PassiveAggressive* (deprec.)              iterates
MLPClassifier, MLPRegressor    no         shared init; start plus every replica's change
                                          to weights and Adam/SGD moments (opt-out:
                                          plain average); global t_ and Adam t
Multinomial/Complement/        yes        counts summed, log-probabilities recomputed
BernoulliNB, CategoricalNB
GaussianNB                     yes        Chan merge per class, epsilon_ of all rows
StandardScaler, MinMaxScaler,  yes        Chan merge per feature / elementwise min, max
MaxAbsScaler
IncrementalPCA                 yes [1]_   replicas keep every component; SVD of the
                                          pooled scatter matrix, truncated once
MiniBatchKMeans                no         shared init; centres pool absorbed points
LatentDirichletAllocation      no         shared init; lambda averaged; global schedule
MiniBatchNMF                   no         shared init; update sums added
MiniBatchDictionaryLearning    no         shared init; dictionary and stats averaged
BernoulliRBM                   no         shared init; weights averaged
HashingVectorizer              yes        stateless
OneVsRest/OneVsOne/            as inner   each sub-estimator with the inner rule
MultiOutput*/SelectFromModel
Birch                          --         unmergeable (see ``unmergeable_reason``)
=============================  =========  ================================================

.. [1] batch PCA of every row seen, at any ``n_components``; not scikit-learn's serial
   ``partial_fit``, which truncates after every batch (see :mod:`._moments`). Replicas hold
   ``n_features**2`` numbers; ``register_incremental_pca_merge(..., every_component=False)``
   keeps ``n_components`` instead (exact only when that is ``n_features``).
"""

from sklearn.cluster import Birch, MiniBatchKMeans
from sklearn.decomposition import (
    IncrementalPCA,
    LatentDirichletAllocation,
    MiniBatchDictionaryLearning,
    MiniBatchNMF,
)
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.feature_selection import SelectFromModel
from sklearn.linear_model import SGDOneClassSVM
from sklearn.multiclass import OneVsOneClassifier, OneVsRestClassifier
from sklearn.multioutput import MultiOutputClassifier, MultiOutputRegressor
from sklearn.naive_bayes import (
    BernoulliNB,
    CategoricalNB,
    ComplementNB,
    GaussianNB,
    MultinomialNB,
)
from sklearn.neural_network import BernoulliRBM, MLPClassifier, MLPRegressor
from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler, StandardScaler

from taskdml._compat import BaseSGDClassifier, BaseSGDRegressor
from taskdml.parallel.merge import _bayes as _merge_bayes
from taskdml.parallel.merge import _cluster as _merge_cluster
from taskdml.parallel.merge import _decomposition as _merge_decomposition
from taskdml.parallel.merge import _linear as _merge_linear
from taskdml.parallel.merge import _meta as _merge_meta
from taskdml.parallel.merge import _moments as _merge_moments
from taskdml.parallel.merge import _neural as _merge_neural
from taskdml.parallel.merge import _stopping
from taskdml.parallel.merge._moments import register_incremental_pca_merge
from taskdml.parallel.merge._neural import register_mlp_merge
from taskdml.parallel.merge._registry import (
    MergeRule,
    get_merge_rule,
    merge_replicas,
    prepare_start,
    register_merge,
    register_unmergeable,
    round_start,
    unmergeable_reason,
)
from taskdml.parallel.merge._util import batch_size

__all__ = [
    "MergeRule",
    "get_merge_rule",
    "merge_replicas",
    "prepare_start",
    "register_incremental_pca_merge",
    "register_merge",
    "register_mlp_merge",
    "register_unmergeable",
    "round_start",
    "unmergeable_reason",
]

_SGD_BUFFERS = ("_standard_coef", "_standard_intercept", "_average_coef", "_average_intercept")
_SGD_START = ("t_", "_average_coef", "_average_intercept")


def _register_builtin_rules():
    # BaseSGDClassifier/BaseSGDRegressor also cover Perceptron and the deprecated
    # PassiveAggressive* estimators, which subclass them.
    for cls in (BaseSGDClassifier, BaseSGDRegressor, SGDOneClassSVM):
        register_merge(
            cls,
            _merge_linear.merge_sgd,
            family="linear-sgd",
            notes=_merge_linear.SGD_NOTES,
            private_state=_SGD_BUFFERS,
            start_state=_SGD_START,
            stopping=_stopping.sgd_stopping,
            min_merges=1,  # measured: no loss at one merge an epoch (engine/_period.py)
        )
    for cls in (MLPClassifier, MLPRegressor):
        _merge_neural.register_mlp_merge(cls)
    register_merge(
        BernoulliRBM,
        _merge_neural.merge_rbm,
        prepare=_merge_neural.prepare_rbm,
        family="rbm",
        notes=_merge_neural.RBM_NOTES,
        stopping=_stopping.passes("n_iter"),
        batch_rows=batch_size,
    )
    for cls in (MultinomialNB, ComplementNB, BernoulliNB):
        register_merge(
            cls,
            _merge_bayes.merge_discrete_nb,
            exact=True,
            family="naive-bayes-counts",
            notes=_merge_bayes.DISCRETE_NB_NOTES,
            start_state=("class_count_", "feature_count_"),
        )
    register_merge(
        CategoricalNB,
        _merge_bayes.merge_categorical_nb,
        exact=True,
        family="naive-bayes-categories",
        notes=_merge_bayes.CATEGORICAL_NB_NOTES,
        reference="one_call",
        start_state=("class_count_", "category_count_"),
    )
    register_merge(
        GaussianNB,
        _merge_bayes.merge_gaussian_nb,
        exact=True,
        family="gaussian-nb",
        notes=_merge_bayes.GAUSSIAN_NB_NOTES,
        reference="one_call",
        start_state=("class_count_", "theta_", "var_", "epsilon_"),
    )
    register_merge(
        StandardScaler,
        _merge_moments.merge_standard_scaler,
        exact=True,
        family="scaler-moments",
        notes=_merge_moments.STANDARD_SCALER_NOTES,
        start_state=("n_samples_seen_", "mean_", "var_"),
    )
    register_merge(
        MinMaxScaler,
        _merge_moments.merge_min_max_scaler,
        exact=True,
        family="scaler-min-max",
        notes=_merge_moments.MIN_MAX_NOTES,
        start_state=("n_samples_seen_",),
    )
    register_merge(
        MaxAbsScaler,
        _merge_moments.merge_max_abs_scaler,
        exact=True,
        family="scaler-max-abs",
        notes=_merge_moments.MAX_ABS_NOTES,
        start_state=("n_samples_seen_",),
    )
    _merge_moments.register_incremental_pca_merge(IncrementalPCA)
    register_merge(
        MiniBatchKMeans,
        _merge_cluster.merge_minibatch_kmeans,
        prepare=_merge_cluster.prepare_minibatch_kmeans,
        family="minibatch-kmeans",
        notes=_merge_cluster.MINIBATCH_KMEANS_NOTES,
        private_state=("_counts", "_n_since_last_reassign"),
        start_state=("cluster_centers_", "_counts", "n_steps_"),
        min_rows=_merge_cluster.minibatch_kmeans_min_rows,
        stopping=_stopping.kmeans_stopping,
        batch_rows=batch_size,
    )
    register_merge(
        LatentDirichletAllocation,
        _merge_decomposition.merge_lda,
        prepare=_merge_decomposition.prepare_lda,
        family="online-lda",
        notes=_merge_decomposition.LDA_NOTES,
        start_state=("n_batch_iter_",),
        stopping=_stopping.passes("max_iter"),
    )
    register_merge(
        MiniBatchNMF,
        _merge_decomposition.merge_minibatch_nmf,
        prepare=_merge_decomposition.prepare_minibatch_nmf,
        family="minibatch-nmf",
        notes=_merge_decomposition.NMF_NOTES,
        private_state=("_components_numerator", "_components_denominator"),
        start_state=("n_steps_", "_components_numerator", "_components_denominator"),
        batch_rows=batch_size,
    )
    register_merge(
        MiniBatchDictionaryLearning,
        _merge_decomposition.merge_dictionary_learning,
        prepare=_merge_decomposition.prepare_dictionary_learning,
        family="dictionary-learning",
        notes=_merge_decomposition.DICTIONARY_NOTES,
        private_state=("_A", "_B"),
        start_state=("n_steps_",),
        batch_rows=batch_size,
    )
    register_merge(
        HashingVectorizer,
        _merge_decomposition.merge_stateless,
        exact=True,
        family="stateless",
        notes="Exact: HashingVectorizer learns nothing; partial_fit is a no-op.",
    )
    meta = dict(exact=True, family="meta", notes=_merge_meta.META_NOTES)
    register_merge(
        OneVsRestClassifier,
        _merge_meta.merge_estimators_list,
        prepare=_merge_meta.prepare_one_vs_rest,
        **meta,
    )
    register_merge(
        OneVsOneClassifier,
        _merge_meta.merge_estimators_list,
        prepare=_merge_meta.prepare_one_vs_one,
        **meta,
    )
    for cls in (MultiOutputClassifier, MultiOutputRegressor):
        register_merge(
            cls,
            _merge_meta.merge_estimators_list,
            prepare=_merge_meta.prepare_multi_output,
            **meta,
        )
    register_merge(
        SelectFromModel,
        _merge_meta.merge_select_from_model,
        prepare=_merge_meta.prepare_select_from_model,
        **meta,
    )
    register_unmergeable(Birch, _merge_decomposition.BIRCH_REASON)


_register_builtin_rules()
