"""The runner's use of the step cache: reuse a step's stored outputs, or store new ones.

Before a step runs, :meth:`Reuse.reuse` looks its key up (:mod:`taskdml.cache._keys`). On a
hit the step does not run: its outputs are read back (chunked ones lazily: a step that reads
them persists or streams them as it would a Zarr store, and data that no step reads again is
never read), the run directory gets the files the step made when it ran (models, trials
tables, pictures) and its manifest entry (training history, metrics), and the step is
``completed`` with ``cache.hit: true``. On a miss the
reasons are recorded (:func:`taskdml.cache._keys.explain`), the step runs — its trainings
checkpointing into the store (:mod:`taskdml.cache._checkpoints`) — and
:meth:`Reuse.keep` stores its outputs. Every step's manifest entry gets ``cache``: ``key``,
``hit`` and ``why`` (what ``taskdml run --explain`` prints).

A step whose outputs the cache cannot store (a type no format takes) still runs and its
dependants are still keyed (a key names the computation, not the stored bytes); it is
recorded as not stored, with a warning. A full disk fails the step (exit 1) with what to do.
"""

import warnings

from taskdml.cache._store import Uncacheable
from taskdml.exceptions import CacheWarning
from taskdml.runner._plan import why_missing

# What a step's manifest entry holds that belongs to this run, not to its outputs.
_OF_THIS_RUN = (
    "state",
    "started",
    "duration_s",
    "summary",
    "error",
    "traceback",
    "retried",
    "cache",
)


class Reuse:
    """The cache as one run uses it.

    Parameters
    ----------
    plan : RunPlan
        The run's plan: its cache (``None``: nothing is reused or stored, each step records
        ``cache: off``) and every step's key.
    recorder : object
        The run's recorder (:class:`taskdml.runner._runner._Recorder`), the only writer of
        the run's records.
    """

    def __init__(self, plan, recorder):
        self.cache, self.pipeline, self.recorder = plan.cache, plan.pipeline, recorder
        self.keys = {planned.name: planned.key for planned in plan.steps if planned.key}
        self.off = "the cache is off"  # why, when it is

    def check_reach(self, client):
        """Turn the cache off, with a warning, when it is a folder of this machine and some
        worker runs on another: workers write and read chunked outputs themselves."""
        from urllib.parse import urlsplit

        if self.cache is None or not self.cache.local or client is None:
            return
        hosts = {urlsplit(a).hostname for a in client.scheduler_info(n_workers=-1)["workers"]}
        elsewhere = sorted(hosts - _this_machine())
        if elsewhere:
            self.off = (
                f"the cache folder {self.cache.url} is on this machine, but workers run on "
                f"{', '.join(elsewhere)}; give --cache-dir a folder they share, or a URL "
                "(s3://...)"
            )
            warnings.warn(f"the step cache is off: {self.off}.", CacheWarning, stacklevel=2)
            self.cache, self.keys = None, {}

    def key(self, step):
        """The step's cache key, or ``None`` (no cache, or no key)."""
        found = self.keys.get(step.name)
        return found.key if found is not None else None

    def reuse(self, step, context):
        """The step's stored outputs, or ``None`` when it must run (the reasons recorded)."""
        if self.cache is None:
            self.recorder.step(step.name, cache={"hit": False, "why": [self.off]})
            return None
        found = self.keys[step.name]
        if found.key is None:
            self._miss(step, None, [f"not cached: {found.problem}"])
            return None
        entry = self.cache.lookup(found.key)
        if entry is None:
            self._miss(step, found.key, why_missing(self.cache, self.pipeline, step.name, found))
            return None
        try:
            produced = self.cache.load(entry, context.client)
            self._restore(step, entry, context)
        except Exception as error:  # unreadable (a file removed by hand): run it again
            warnings.warn(
                f"step {step.name!r}: its cached outputs could not be read ({error}); it runs "
                "again.",
                CacheWarning,
                stacklevel=2,
            )
            self.cache.discard(found.key)  # so that the new outputs take its place
            self._miss(step, found.key, [f"its cached outputs could not be read ({error})"])
            return None
        self.recorder.step(
            step.name,
            cache={
                "key": found.key,
                "hit": True,
                "why": [f"reused the outputs of run {entry['run_id']} ({entry['created']})"],
            },
        )
        return produced

    def _miss(self, step, key, why):
        self.recorder.step(step.name, cache={"key": key, "hit": False, "why": why})

    def _restore(self, step, entry, context):
        for name in entry["artifacts"]:
            self.recorder.write_file(name, self.cache.artifact(entry, name))
        record = entry.get("record", {})
        if record:
            self.recorder.step(step.name, **record)
        if entry.get("metrics") is not None:
            context.record_metrics(entry["metrics"])

    def keep(self, step, produced, context):
        """Store the outputs of *step*, which just ran."""
        found = self.keys.get(step.name)
        if self.cache is None or found is None or found.key is None:
            return
        entry = dict(self.recorder.steps.get(step.name, {}))
        record = {k: v for k, v in entry.items() if k not in _OF_THIS_RUN}
        directory = self.recorder.directory
        artifacts = (
            [
                (path.relative_to(directory.path).as_posix(), path)
                for artifact in record.get("artifacts", {}).values()
                for path in _files(directory.path / artifact["path"])
            ]
            if directory is not None
            else []
        )
        about = {
            "pipeline": self.pipeline.name,
            "step": step.name,
            "run_id": directory.run_id if directory is not None else None,
            "parts": found.parts,
            "record": record,
            "metrics": self.recorder.metrics.get(step.name),
        }
        try:
            self.cache.store(
                found.key, produced, client=context.client, about=about, artifacts=artifacts
            )
        except Uncacheable as error:
            warnings.warn(
                f"step {step.name!r}: its outputs are not cached: {error}", CacheWarning, 2
            )
            cache = {**entry.get("cache", {}), "stored": False, "not_stored": str(error)}
            self.recorder.step(step.name, cache=cache)
        self.cache.remember(self.pipeline.name, step.name, found.parts)
        self.cache.drop_checkpoints(found.key)


def _files(path):
    """The files of an artifact: itself, or those under it (a sharded model's folder)."""
    if path.is_dir():
        return sorted(found for found in path.rglob("*") if found.is_file())
    return [path] if path.exists() else []


def _this_machine():
    """The host names and addresses of this machine."""
    import socket

    import psutil

    names = {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()}
    for addresses in psutil.net_if_addrs().values():
        names.update(address.address.split("%")[0] for address in addresses)
    return names
