"""The step kinds' code: what a ``call``, ``map``, ``fit``, ``search`` or ``evaluate`` step does
when it runs.

Each module has one ``run(step, inputs, context) -> {output: value}``. The kinds are declared
in :mod:`taskdml.pipeline._kinds` (their keys, inputs and outputs) and name these functions by
``"module:function"``; the runner imports a kind's module only when a step of that kind runs,
so validating a file stays fast and the runner never imports the steps statically. A step
module may import the engines (``taskdml.parallel``, ``taskdml.model_selection``,
``taskdml.metrics``), the pipeline model and the runner's values and context; nothing imports
it but by name.
"""
