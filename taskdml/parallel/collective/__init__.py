"""How replicas exchange models: the all-reduce and the parameter server.

:mod:`._direct` is the default all-reduce, direct messages between the replicas' workers
(recursive doubling); :mod:`._server` holds the actor forms (an all-reduce actor, the
parameter server of async training). May import the merge registry and the base modules.
"""
