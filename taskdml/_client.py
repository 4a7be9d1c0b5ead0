"""The one way taskdml finds the distributed client.

Every entry point takes ``client=None``: the client passed in wins; ``None`` means the current
client if there is one (the one made current with ``Client.as_current``, as the runner does
per step, or the process default); ``False`` means none, the work runs in this process.
Estimators never require a client for in-memory data; what cannot run without one (silos
pinned to workers, blocks exchanging margins) says so with :func:`resolve_client`'s
``required``.
"""


def current_client():
    """The distributed client of this context, or ``None``."""
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    try:
        client = default_client()
    except ValueError:
        return None
    # distributed keeps a closed client as the default; work sent to it would wait forever
    return None if client.status in ("closing", "closed") else client


def resolve_client(client=None, *, required=None):
    """The client to use: *client* if given, ``None`` for ``False``, else the current one.

    Parameters
    ----------
    client : distributed.Client, False or None
    required : str, optional
        What needs a client (``"train_federated"``): with none found, a ``ValueError``
        says so and how to get one.

    Returns
    -------
    distributed.Client or None

    Examples
    --------
    >>> resolve_client(False) is None
    True
    """
    if client is False:
        client = None
    elif client is None:
        client = current_client()
    if client is None and required is not None:
        raise ValueError(
            f"{required} needs a distributed client and found none; start one first "
            "(distributed.Client(), or distributed.LocalCluster() for this machine)."
        )
    return client
