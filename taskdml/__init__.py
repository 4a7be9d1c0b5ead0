"""taskdml: machine-learning pipelines on Dask."""

__version__ = "0.1.0"

__all__ = ["__version__"]
