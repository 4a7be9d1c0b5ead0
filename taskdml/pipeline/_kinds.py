"""The built-in step kinds: what each one accepts, what it returns, and where its code lives.

A kind is declared here once; :mod:`taskdml.pipeline._model` validates steps against these
declarations and the runner imports ``run`` only when a step of that kind executes, so
validating a file stays fast.
"""

import dataclasses
import pkgutil


@dataclasses.dataclass(frozen=True)
class StepKind:
    """A step kind: its own keys, fixed or default outputs, and its inputs.

    Attributes
    ----------
    name : str
        The key that names the kind in a step (``call``, ``map``, ``fit``, ``search``,
        ``evaluate``).
    keys : frozenset
        The other step keys this kind accepts.
    outputs : tuple of str
        Its outputs (the default names, for ``call``).
    outputs_fixed : bool
        Whether a step may rename its outputs.
    required_inputs, allowed_inputs : frozenset
        Inputs a step of this kind must have, and may have (``None``: any).
    run : str
        ``"module:function"`` of its ``run(step, inputs, context)``.
    """

    name: str
    keys: frozenset
    outputs: tuple
    outputs_fixed: bool
    required_inputs: frozenset = frozenset()
    allowed_inputs: frozenset | None = None
    run: str = ""

    def runner(self):
        """The function that runs steps of this kind, imported now.

        Returns
        -------
        callable
            ``run(step, inputs, context) -> {output: value}``.
        """
        return pkgutil.resolve_name(self.run)


KINDS = {
    kind.name: kind
    for kind in (
        StepKind(
            "call",
            keys=frozenset({"with", "outputs", "foreach"}),
            outputs=("result",),
            outputs_fixed=False,
            run="taskdml.steps.call:run",
        ),
        StepKind(
            "map",
            keys=frozenset({"with", "foreach", "features"}),
            outputs=("data",),
            outputs_fixed=True,
            required_inputs=frozenset({"data"}),
            run="taskdml.steps.map:run",
        ),
        StepKind(
            "fit",
            keys=frozenset({"with", "classes", "parallel", "foreach"}),
            outputs=("model",),
            outputs_fixed=True,
            required_inputs=frozenset({"data"}),
            allowed_inputs=frozenset({"data", "preprocess"}),
            run="taskdml.steps.fit:run",
        ),
        StepKind(
            "search",
            keys=frozenset(
                {
                    "with",
                    "method",
                    "space",
                    "budget",
                    "cv",
                    "validation_fraction",
                    "scoring",
                    "classes",
                    "parallel",
                }
            ),
            outputs=("best_model", "best_params", "trials"),
            outputs_fixed=True,
            required_inputs=frozenset({"data"}),
            allowed_inputs=frozenset({"data", "preprocess"}),
            run="taskdml.steps.search:run",
        ),
        StepKind(
            "evaluate",
            keys=frozenset(),
            outputs=("metrics",),
            outputs_fixed=True,
            required_inputs=frozenset({"model", "data"}),
            allowed_inputs=frozenset({"model", "data", "preprocess"}),
            run="taskdml.steps.evaluate:run",
        ),
        StepKind(
            "predict",
            keys=frozenset({"model", "path"}),
            outputs=("predictions",),
            outputs_fixed=True,
            required_inputs=frozenset({"data"}),
            allowed_inputs=frozenset({"model", "data"}),
            run="taskdml.steps.predict:run",
        ),
    )
}
