"""Graph parallelism: graphs partitioned over the workers, vertex programs run in supersteps
where the partitions live, and the algorithms written with them.

``_partition`` (the edges Dataset, :func:`partition_graph` and its :class:`Partition`\\s),
``_spill`` (partitions out of core: a CSR on the worker's disk, streamed in row blocks),
``_supersteps`` (one long-running task per partition, BSP supersteps whose messages go
worker to worker), ``_program`` (the vertex-program API), ``_algorithms`` (PageRank,
connected components, label spreading, propagated features), ``_features`` (vertex results as
table columns, for pipelines), ``_bipartite`` (a bipartite graph partitioned by user and by
item ranges, :func:`partition_bipartite`), ``_factorize`` (matrix factorisation on it:
:func:`als`, :func:`sgd_factorize`) and ``_logistic`` (:func:`sparse_logistic_regression` on
the sample-feature graph). May import
``taskdml.parallel.collective`` and the base modules. Names are imported on first use
(PEP 562), so a worker that unpickles a task function imports only its module.
"""

from taskdml._lazy import exports

# public name -> the module that defines it
_LAZY = {
    "SuperstepResult": "taskdml.graph._supersteps",
    "run_supersteps": "taskdml.graph._supersteps",
    "VertexProgram": "taskdml.graph._program",
    "connected_components": "taskdml.graph._algorithms",
    "join_vertex_features": "taskdml.graph._features",
    "vertex_table": "taskdml.graph._features",
    "label_spreading": "taskdml.graph._algorithms",
    "pagerank": "taskdml.graph._algorithms",
    "propagate_features": "taskdml.graph._algorithms",
    "BipartiteGraph": "taskdml.graph._bipartite",
    "partition_bipartite": "taskdml.graph._bipartite",
    "FactorizationModel": "taskdml.graph._factorize",
    "als": "taskdml.graph._factorize",
    "sgd_factorize": "taskdml.graph._factorize",
    "SparseLogisticModel": "taskdml.graph._logistic",
    "sparse_logistic_regression": "taskdml.graph._logistic",
    "PartitionedGraph": "taskdml.graph._partition",
    "edges_from_networkx": "taskdml.graph._partition",
    "edges_from_scipy": "taskdml.graph._partition",
    "edges_from_table": "taskdml.graph._partition",
    "partition_graph": "taskdml.graph._partition",
}

__all__ = [
    "BipartiteGraph",
    "FactorizationModel",
    "PartitionedGraph",
    "SparseLogisticModel",
    "SuperstepResult",
    "VertexProgram",
    "als",
    "connected_components",
    "edges_from_networkx",
    "edges_from_scipy",
    "edges_from_table",
    "join_vertex_features",
    "label_spreading",
    "pagerank",
    "partition_bipartite",
    "partition_graph",
    "propagate_features",
    "run_supersteps",
    "sgd_factorize",
    "sparse_logistic_regression",
    "vertex_table",
]


__getattr__, __dir__ = exports(__name__, _LAZY)
