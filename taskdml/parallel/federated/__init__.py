"""Federated training: FedAvg across data silos pinned to their workers (:mod:`._train`), with
secure aggregation and client-level differential privacy (:mod:`._privacy`). The silos' data
never leaves their workers; only model states move. May import the merge registry and the
base modules.
"""
