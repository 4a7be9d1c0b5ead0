"""The plan of a run: what would run, in which order, what the cache would give back, where.

``load → validate → plan → execute → record``. :func:`plan_run` is the one place a run is
planned: it orders the steps, computes every step's cache key once
(:mod:`taskdml.cache._keys`), looks each key up in the store without touching it (so a plan
changes nothing), and chooses the cluster by the one precedence rule
(:func:`taskdml.cluster._connect.choose`). ``taskdml run --dry-run`` prints this plan and
stops; :func:`taskdml.run_pipeline` executes the same plan: it connects to
``plan.cluster``, and its steps reuse or store outputs under ``plan.steps[i].key``.

A reuse decision is a prediction made at planning time; execution looks the key up again
(a step planned as a hit whose entry was removed since, or proved unreadable, runs), and
records what happened.
"""

import dataclasses

from taskdml.cache import _keys as cache_keys
from taskdml.cluster._connect import choose

_NOT_STORED = (
    "its outputs are not in the cache (the step did not finish last time, or they were removed)"
)


@dataclasses.dataclass(frozen=True)
class PlannedStep:
    """One step of a :class:`RunPlan`.

    Attributes
    ----------
    name, kind : str
    inputs : tuple of str
        The steps it reads from.
    key : cache.StepKey or None
        Its cache key (``key.key`` is ``None`` when a part of it cannot be computed, and
        ``key.problem`` says why); ``None`` when the cache is off.
    reuse : bool or None
        Whether the cache holds its outputs now; ``None`` when the cache is off.
    why : tuple of str
        Why it would be reused or run.
    """

    name: str
    kind: str
    inputs: tuple
    key: object
    reuse: bool | None
    why: tuple

    def cache_record(self):
        """The step's ``cache`` entry as the manifest and ``--explain`` show it."""
        return {
            "key": self.key.key if self.key is not None else None,
            "hit": bool(self.reuse),
            "why": list(self.why),
        }


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A run planned before anything runs.

    Attributes
    ----------
    pipeline : PipelineSpec
    steps : tuple of PlannedStep
        In an order where every step follows its inputs.
    cluster : taskdml.cluster._connect.Target
        Where the steps would run.
    cache : Cache or None
        The store reused from and written to; ``None``: off.
    """

    pipeline: object
    steps: tuple
    cluster: object
    cache: object

    def step(self, name):
        """The :class:`PlannedStep` named *name*."""
        return next(planned for planned in self.steps if planned.name == name)

    def to_dict(self):
        """The plan as JSON-able data (what ``--dry-run --json`` prints)."""
        return {
            "pipeline": self.pipeline.name,
            "cluster": self.cluster.description,
            "steps": [
                {
                    "name": planned.name,
                    "kind": planned.kind,
                    "inputs": list(planned.inputs),
                    **({"cache": planned.cache_record()} if self.cache is not None else {}),
                }
                for planned in self.steps
            ],
        }


def plan_run(pipeline, *, cache=None, client=None, scheduler=None, n_workers=None):
    """Plan a run of *pipeline*: steps in order, cache keys and reuse, the cluster.

    Parameters
    ----------
    pipeline : PipelineSpec
    cache : Cache, optional
        The step cache; ``None``: off.
    client, scheduler, n_workers
        As :func:`taskdml.run_pipeline` takes them; they override the file's ``cluster``.

    Returns
    -------
    RunPlan

    Examples
    --------
    >>> from taskdml import PipelineSpec, Step
    >>> pipe = PipelineSpec("iris", [
    ...     Step("data", call="taskdml.datasets:load_sklearn", with_={"name": "iris"}),
    ... ])
    >>> plan = plan_run(pipe, n_workers=1)
    >>> [planned.name for planned in plan.steps], plan.cluster.kind
    (['data'], 'local')
    """
    keys = cache_keys.step_keys(pipeline) if cache is not None else {}
    inputs = pipeline.dependencies()
    steps = []
    for step in pipeline.ordered_steps():
        found = keys.get(step.name)
        reuse, why = _decision(cache, pipeline, step.name, found)
        steps.append(
            PlannedStep(step.name, step.kind, tuple(sorted(inputs[step.name])), found, reuse, why)
        )
    target = choose(
        pipeline.cluster,
        scheduler=scheduler,
        n_workers=n_workers,
        client=client,
        silos=pipeline.silos,
    )
    return RunPlan(pipeline, tuple(steps), target, cache)


def _decision(cache, pipeline, name, found):
    if cache is None:
        return None, ("the cache is off",)
    if found.key is None:
        return False, (f"not cached: {found.problem}",)
    if cache.lookup(found.key, touch=False) is not None:
        return True, ("its outputs are in the cache",)
    return False, tuple(why_missing(cache, pipeline, name, found))


def why_missing(cache, pipeline, name, found):
    """Why step *name*'s key (*found*) is not in *cache*: how it differs from its last run."""
    return cache_keys.explain(found.parts, cache.last(pipeline.name, name)) or [_NOT_STORED]
