"""The model of the tabular example, named by the pipeline's ``fit:`` step (a factory)."""

import numpy as np
from sklearn.compose import make_column_selector, make_column_transformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import SGDClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler


def build_pipeline(categorical=("grade",), alpha=1e-4, random_state=0):
    """One-hot categories, impute and scale numbers, then a logistic-loss linear model.

    taskdml fits the encoder, the imputer and the scaler chunk by chunk with exact merges
    (the union of the categories; sums and counts), then trains the classifier
    data-parallel on the transformed chunks.

    Parameters
    ----------
    categorical : sequence of str
        The categorical columns; every numeric column is imputed (mean) and scaled.
    alpha : float
    random_state : int

    Returns
    -------
    sklearn.pipeline.Pipeline
    """
    columns = make_column_transformer(
        (OneHotEncoder(handle_unknown="ignore"), list(categorical)),
        (
            make_pipeline(SimpleImputer(strategy="mean"), StandardScaler()),
            make_column_selector(dtype_include=np.number),
        ),
    )
    return make_pipeline(
        columns, SGDClassifier(loss="log_loss", alpha=alpha, random_state=random_state)
    )
