"""Text renderings of a pipeline's DAG: plain text, Mermaid and Graphviz dot."""

import json


def render(pipeline, fmt="text"):
    """Render *pipeline*'s DAG as text (``taskdml show``).

    Parameters
    ----------
    pipeline : PipelineSpec
    fmt : {"text", "mermaid", "dot", "json"}, default "text"
        Plain lines, a Mermaid flowchart, a Graphviz digraph, or the pipeline mapping with its
        topological order. Mermaid and dot draw one edge per input, labelled
        ``output -> argument``.

    Returns
    -------
    str
    """
    return {"text": _text, "mermaid": _mermaid, "dot": _dot, "json": _json}[fmt](pipeline)


def _target(step):
    return ", ".join(step.target) if step.kind == "evaluate" else step.target


def _edges(pipeline):
    for step in pipeline.ordered_steps():
        for argument, _, source, output in step.references():
            yield (
                source,
                step.name,
                f"{output or pipeline.step(source).output_names[0]} -> {argument}",
            )


def _text(pipeline):
    steps = pipeline.ordered_steps()
    width = max(len(step.name) for step in steps)
    lines = [pipeline.name + (f": {pipeline.description}" if pipeline.description else "")]
    for step in steps:
        sources = sorted({ref[2] for ref in step.references()})
        line = f"  {step.name:<{width}}  {step.kind:<8}  {_target(step)}"
        if sources:
            line += f"  <- {', '.join(sources)}"
        if "mode" in (step.parallel or {}):
            line += f"  [{_MODES[step.mode]}]"
        silos = pipeline.silos_of(step)
        if silos:
            line += f"  across silos {', '.join(silos)}"
        items = [label for label, _ in step.foreach_items() if label]
        if items:
            line += (
                f"  [{len(items)} items: {'; '.join(items[:4])}{' ...' if len(items) > 4 else ''}]"
            )
        lines.append(line)
    return "\n".join(lines)


_MODES = {
    "data": "data parallel",
    "model": "model parallel",
    "federated": "federated",
    "task": "task parallel",
    "auto": "parallelism chosen at run time",
}


def _mermaid(pipeline):
    lines = ["flowchart TD"]
    for step in pipeline.ordered_steps():
        label = f"{step.name}<br/><small>{step.kind}: {_target(step)}</small>".replace('"', "'")
        lines.append(f'    {step.name}["{label}"]')
    lines += [f"    {source} -->|{label}| {target}" for source, target, label in _edges(pipeline)]
    return "\n".join(lines)


def _dot(pipeline):
    lines = [f'digraph "{pipeline.name}" {{', "    rankdir=TB;", "    node [shape=box];"]
    for step in pipeline.ordered_steps():
        label = f"{step.name}\\n{step.kind}: {_target(step)}".replace('"', "'")
        lines.append(f'    {step.name} [label="{label}"];')
    lines += [
        f'    {source} -> {target} [label="{label}"];' for source, target, label in _edges(pipeline)
    ]
    return "\n".join(lines + ["}"])


def _json(pipeline):
    return json.dumps(
        {"pipeline": pipeline.to_dict(), "order": [step.name for step in pipeline.ordered_steps()]},
        indent=2,
    )
