"""How a fitted model becomes bytes and comes back: skops where skops trusts every type of
it, joblib otherwise (and then only for bytes taskdml wrote itself). The step cache and the
run directories both write models this way.
"""


def dump_model(model):
    """A fitted model as bytes: skops where skops trusts every type of it, else joblib.

    Parameters
    ----------
    model : estimator

    Returns
    -------
    data : bytes
    facts : dict
        ``{"format": "skops"}``, or ``{"format": "joblib", "why_not_skops": reason}``.
    """
    import skops.io

    try:
        data = skops.io.dumps(model)
        untrusted = skops.io.get_untrusted_types(data=data)
        if untrusted:
            raise TypeError(f"types skops does not trust: {untrusted}")
        return data, {"format": "skops"}
    except Exception as error:  # skops refuses many types; joblib takes them all
        import io

        import joblib

        buffer = io.BytesIO()
        joblib.dump(model, buffer)
        return buffer.getvalue(), {
            "format": "joblib",
            "why_not_skops": f"{type(error).__name__}: {error}",
        }


def load_model_bytes(data, format):
    """The model :func:`dump_model` wrote as *data* in *format*.

    Parameters
    ----------
    data : bytes
    format : {"skops", "joblib"}
        ``"skops"`` loads only the types skops trusts; ``"joblib"`` loads anything, so only
        for bytes taskdml wrote itself.

    Returns
    -------
    estimator
    """
    import io

    if format == "skops":
        import skops.io

        return skops.io.loads(data)
    import joblib

    return joblib.load(io.BytesIO(data))
