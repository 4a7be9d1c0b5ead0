"""Exhaustive and random searches with scikit-learn's contract: :mod:`._search`
(``GridSearchCV``, ``RandomizedSearchCV``), :mod:`._graph` and :mod:`._tasks` (in-memory data:
candidate × fold tasks, shared pipeline prefixes), :mod:`._chunked` (chunked data: folds of
whole chunks, candidates trained by the engine).
"""
