"""Merge rules for the online matrix factorisations: LDA, MiniBatchNMF, MiniBatchDictionaryLearning.

All three start from a random or data-dependent initialisation, so ``prepare`` runs it once
on the first chunk and every replica starts from the same factors.

- LatentDirichletAllocation (online variational Bayes): each mini-batch moves ``components_``
  (lambda) by a convex step ``rho_t``; the replicas' lambdas are averaged by rows seen (a
  convex combination keeps lambda positive, where summing the steps can overshoot), and
  ``n_batch_iter_``, which sets ``rho_t``, adds every replica's batches.
- MiniBatchNMF keeps the numerator and denominator of its multiplicative update as decayed
  sums ``A <- rho A + num``, ``B <- rho B + den``, and ``H = (A / B) ** gamma``. The round's
  contributions are added to the start's sums decayed by the round's steps, and H is
  recomputed from them.
- MiniBatchDictionaryLearning keeps ``_A``/``_B`` as decayed running means of
  ``code' code`` and ``X' code``; its dictionary is the result of a block-coordinate sweep
  from the previous one, not a function of ``_A``/``_B``, so the statistics and the
  dictionaries are averaged by rows seen.
"""

import copy

import numpy as np
from sklearn.base import clone
from sklearn.utils import check_random_state
from sklearn.utils.validation import validate_data

from taskdml import _compat
from taskdml._compat import _dirichlet_expectation_2d
from taskdml.parallel.merge._registry import round_start
from taskdml.parallel.merge._util import proportions, weighted_mean


def prepare_lda(estimator, X, y, classes):
    """Draw LDA's initial topic-word parameters once."""
    if hasattr(estimator, "components_"):
        return copy.deepcopy(estimator)
    lda = clone(estimator)
    X = _compat.check_non_neg_array(
        lda, X, reset_n_features=True, whom="LatentDirichletAllocation.partial_fit"
    )
    _compat.init_latent_vars(lda, X.shape[1], dtype=X.dtype)
    return lda


def merge_lda(replicas, weights):
    """Average the topic-word parameters; n_batch_iter_ counts every replica's batches."""
    start = round_start(replicas)
    shares = proportions(weights)
    merged = copy.deepcopy(replicas[0])
    merged.components_ = weighted_mean([r.components_ for r in replicas], shares)
    merged.exp_dirichlet_component_ = np.exp(_dirichlet_expectation_2d(merged.components_))
    batches0 = start.get("n_batch_iter_", 1)
    merged.n_batch_iter_ = batches0 + sum(r.n_batch_iter_ - batches0 for r in replicas)
    return merged


def prepare_minibatch_nmf(estimator, X, y, classes):
    """Initialise MiniBatchNMF's H (and its update sums) once, as its first partial_fit does."""
    if hasattr(estimator, "components_"):
        return copy.deepcopy(estimator)
    nmf = clone(estimator)
    X = validate_data(
        nmf, X, accept_sparse=("csr", "csc"), dtype=[np.float64, np.float32], reset=True
    )
    _compat.check_params(nmf, X)
    _, H = _compat.check_w_h(nmf, X, W=None, H=None, update_H=True)
    nmf._components_numerator = H.copy()
    nmf._components_denominator = np.ones(H.shape, dtype=H.dtype)
    nmf.n_steps_ = 0
    nmf.n_components_ = H.shape[0]
    nmf.components_ = H
    return nmf


def merge_minibatch_nmf(replicas, weights):
    """Add the round's contributions to the update sums; H = (A / B) ** gamma."""
    start = round_start(replicas)
    first = replicas[0]
    steps0 = start.get("n_steps_", 0)
    steps = [r.n_steps_ - steps0 for r in replicas]
    rho = first._rho
    merged = copy.deepcopy(first)
    for name in ("_components_numerator", "_components_denominator"):
        values = [np.asarray(getattr(r, name), dtype=float) for r in replicas]
        base = start.get(name)
        if base is None:
            # No record of the start: average, as for the other factorisations.
            total = weighted_mean(values, proportions(weights))
        else:
            base = np.asarray(base, dtype=float)
            total = rho ** sum(steps) * base
            for value, s in zip(values, steps):
                total = total + (value - rho**s * base)
        setattr(merged, name, total.astype(getattr(first, name).dtype))
    H = merged._components_numerator / merged._components_denominator
    if merged._gamma != 1:
        H **= merged._gamma
    if merged._beta_loss <= 1:
        H[H < np.finfo(np.float64).eps] = 0.0
    merged.components_ = np.ascontiguousarray(H, dtype=first.components_.dtype)
    merged.n_steps_ = steps0 + sum(steps)
    return merged


def prepare_dictionary_learning(estimator, X, y, classes):
    """Initialise the dictionary once, as MiniBatchDictionaryLearning's first partial_fit does."""
    if hasattr(estimator, "components_"):
        return copy.deepcopy(estimator)
    dl = clone(estimator)
    X = validate_data(dl, X, dtype=[np.float64, np.float32], order="C", reset=True)
    _compat.check_params(dl, X)
    dl._random_state = check_random_state(dl.random_state)
    dl.components_ = _compat.initialize_dict(dl, X, dl._random_state)
    dl.n_steps_ = 0
    dl._A = np.zeros((dl._n_components, dl._n_components), dtype=X.dtype)
    dl._B = np.zeros((X.shape[1], dl._n_components), dtype=X.dtype)
    return dl


def merge_dictionary_learning(replicas, weights):
    """Average the dictionaries and the running statistics _A and _B."""
    start = round_start(replicas)
    shares = proportions(weights)
    merged = copy.deepcopy(replicas[0])
    for name in ("components_", "_A", "_B"):
        setattr(merged, name, weighted_mean([getattr(r, name) for r in replicas], shares))
    steps0 = start.get("n_steps_", 0)
    merged.n_steps_ = steps0 + sum(r.n_steps_ - steps0 for r in replicas)
    return merged


def merge_stateless(replicas, weights):
    """Nothing is learned (HashingVectorizer): any replica is the merge."""
    return copy.deepcopy(replicas[0])


LDA_NOTES = (
    "Approximate. prepare draws lambda once; components_ averaged by rows seen, "
    "exp_dirichlet_component_ recomputed, n_batch_iter_ (the step-size schedule) summed."
)
NMF_NOTES = (
    "Approximate. prepare draws H once; the decayed numerator/denominator sums add the "
    "round's contributions to the start decayed by the round's steps; H = (A/B)**gamma; "
    "n_steps_ summed."
)
DICTIONARY_NOTES = (
    "Approximate. prepare draws the dictionary once; components_, _A and _B averaged by "
    "rows seen (they are running means); n_steps_ summed."
)
BIRCH_REASON = (
    "its CF-tree absorbs the round's start into the same subclusters as the new rows, so "
    "the start cannot be subtracted from a replica's tree and a merge would count earlier "
    "data once per replica (one-shot merging of trees built from nothing would be sound, "
    "but the round structure needs more than that)"
)
