"""The records of runs: run directories, reports, pictures and the dashboard page.

:mod:`._directory` owns a run's folder (manifest, events, metrics, models; every write atomic)
and reads runs back (``list``, ``find``, ``compare``, :func:`load_model`); :mod:`._report`
writes ``report.html``; :mod:`._pictures` draws from the records alone; :mod:`._dashboard`
serves the ``/taskdml`` page of the Dask dashboard.

May import the base modules and :mod:`taskdml.cache` (how a model is serialised); never the
runner or the engines.
"""

from taskdml._lazy import exports

# public name -> the module that defines it
_LAZY = {
    "RunDirectory": "taskdml.runs._directory",
    "compare_runs": "taskdml.runs._directory",
    "find_run": "taskdml.runs._directory",
    "list_runs": "taskdml.runs._directory",
    "load_model": "taskdml.runs._directory",
    "run_summary": "taskdml.runs._directory",
    "write_report": "taskdml.runs._report",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = exports(__name__, _LAZY)
