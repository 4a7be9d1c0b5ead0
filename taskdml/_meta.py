"""scikit-learn tags of taskdml's meta-estimators, taken from the estimator they wrap."""

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
