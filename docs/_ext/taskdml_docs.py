"""Pages of the documentation written from the code at build time, so they cannot drift.

When the builder starts, this extension writes Markdown files into ``docs/_generated/``, which
pages include with MyST's ``{include}`` directive:

- ``pipeline_schema.md``: every key of the pipeline file, from :func:`taskdml.schema`;
- ``merge_rules.md``: for every scikit-learn estimator with ``partial_fit``, the merge rule the
  data-parallel engine uses (family, exact or not, notes), from the merge registry;
- ``trust.md``: what a pipeline file may call, from ``taskdml.pipeline._trust``;
- ``results.md``: ``benchmarks/RESULTS.md`` without its title.

It also gives the home page its entry for the guides in ``docs/guides/`` (migration and
deployment), once that folder has pages: ``guides/index`` when it exists, else every page there.

A file is rewritten only when its text changes, so an unchanged build reads nothing again.
"""

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
GENERATED = DOCS / "_generated"
RESULTS = DOCS.parent / "benchmarks" / "RESULTS.md"


def cell(text):
    """``text`` made safe for one cell of a Markdown table."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def prose(text):
    """Text from the code shown as written: Markdown's emphasis characters escaped
    (``_A and _B`` would otherwise turn italic)."""
    for character in ("\\", "*", "_", "`", "<", "["):
        text = text.replace(character, "\\" + character)
    return text


def table(header, rows):
    """A Markdown table with ``header`` and ``rows`` (sequences of cell values)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# -- the pipeline file's schema ---------------------------------------------------------------


def _bound(node):
    """`` ≥ 1`` for a node with a minimum, else ``""``."""
    return f" ≥ {node['minimum']}" if "minimum" in node else ""


def _items(node):
    """What the items of a list are, in words: ``strings``, or ``(integer or string)``."""
    kind = node.get("type")
    if isinstance(kind, str) and not {"enum", "const", "anyOf"} & set(node):
        return {"object": "mappings"}.get(kind, f"{kind}s")
    return f"({describe_type(node)})"


def describe_type(node):
    """What a schema node accepts, in words (``integer ≥ 1``, ``one of `sync`, `async```)."""
    if "const" in node:
        return f"`{node['const']}`"
    if "enum" in node:
        return "one of " + ", ".join(f"`{value}`" for value in node["enum"])
    if "anyOf" in node:
        return " or ".join(option.get("title") or describe_type(option) for option in node["anyOf"])
    if str(node.get("pattern", "")).endswith(":[A-Za-z_][A-Za-z0-9_.]*$"):
        return "a callable, `module:attr`"
    if "title" in node and node.get("type") == "string":
        return prose(node["title"])
    kinds = node.get("type", "any")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    words = []
    for kind in kinds:
        if kind == "array" and isinstance(node.get("items"), dict):
            words.append("list of " + _items(node["items"]))
        elif kind == "object":
            words.append("mapping")
        else:
            words.append(kind + (_bound(node) if kind in ("integer", "number") else ""))
    return " or ".join(words)


def _meaning(node):
    """A node's description, or for a mapping of named entries (``steps``) what one entry is."""
    entry = node.get("additionalProperties")
    if not node.get("description") and isinstance(entry, dict) and entry.get("description"):
        return f"name → {entry['description']}"
    return node.get("description", "")


def schema_rows(node, prefix=""):
    """``(key path, accepts, required, description)`` for every key under ``node``; the keys
    of one step are under ``steps.<name>.``."""
    required = set(node.get("required", ()))
    for name, child in node.get("properties", {}).items():
        path = f"{prefix}{name}"
        yield path, describe_type(child), name in required, _meaning(child)
        yield from schema_rows(child, path + ".")
    named = node.get("additionalProperties")
    if isinstance(named, dict) and "properties" in named:
        yield from schema_rows(named, f"{prefix}<name>.")


def _section(path):
    """``(section, key inside it)``: ``("cluster", "spec.class")``, ``("steps.<name>",
    "parallel.mode")``, or ``("", "name")`` for a top-level key."""
    parts = path.split(".")
    if len(parts) == 1:
        return "", path
    depth = 2 if parts[1] == "<name>" else 1
    return ".".join(parts[:depth]), ".".join(parts[depth:])


def schema_page(schema):
    """The schema as one table per section: the top level, ``cluster``, ``imports`` and the
    keys of one step, each key shown relative to its section."""
    sections = {"": []}
    for path, accepts, required, description in schema_rows(schema):
        section, key = _section(path)
        shown = f"`{key}`" + (" (required)" if required else "")
        sections.setdefault(section, []).append((shown, accepts, prose(description)))
    parts = [f"Generated from `taskdml.schema()` ({schema['title']}).\n"]
    for section, rows in sections.items():
        title = f"Keys under `{section}`" if section else "Top level"
        parts.append(f"### {title}\n\n" + table(["key", "accepts", "meaning"], rows))
    return "\n".join(parts)


# -- the merge rules --------------------------------------------------------------------------


def _exactness(rule):
    if not rule.exact:
        return "no"
    return "partly (see notes)" if rule.exact_when is not None else "yes"


def merge_rule_rows():
    """``(estimator, family, exact, notes)`` for every scikit-learn estimator with
    ``partial_fit``, found by the engine's own lookup (along the class's MRO)."""
    from sklearn.utils import all_estimators

    from taskdml.parallel.merge import _registry as registry

    for name, cls in all_estimators():
        if not hasattr(cls, "partial_fit"):
            continue
        rule, reason = registry._lookup(cls)
        if rule is not None:
            yield name, rule.family, _exactness(rule), rule.notes
        else:
            yield name, "none: sequential fallback", "no", reason or "No rule is registered."


def merge_rules_page():
    """The merge rules as one table, one row per family with the estimators it covers."""
    families = {}
    for name, family, exact, notes in merge_rule_rows():
        families.setdefault((family, exact, notes), []).append(f"`{name}`")
    rows = [
        (", ".join(sorted(names)), family, exact, prose(notes))
        for (family, exact, notes), names in sorted(families.items())
    ]
    intro = (
        "Generated from the merge registry (`taskdml.parallel.get_merge_rule`), for every "
        "estimator of the installed scikit-learn that has `partial_fit`. *Exact* means the "
        "merged model equals one `partial_fit` pass over all the data, up to floating-point "
        "rounding; a sequential fallback trains one replica over every chunk and warns why.\n"
    )
    return intro + "\n" + table(["estimators", "family", "exact", "notes"], rows)


# -- what a pipeline file may call ------------------------------------------------------------


def trust_page():
    """The lists of ``taskdml.pipeline._trust`` as tables."""
    from taskdml.pipeline import _trust

    allow = ", ".join(f"`{glob}`" for glob in _trust.DEFAULT_ALLOW)
    blocked = ", ".join(f"`{name}`" for name in _trust.BLOCKED)
    loaders = table(
        ["callables (`module:attr` globs)", "refused because"],
        [(f"`{glob}`", prose(why)) for glob, why in _trust.CODE_LOADERS.items()],
    )
    arguments = table(
        ["callable", "refused when this argument is true", "because"],
        [
            (f"`{path}`", f"`{arg}`", prose(why))
            for path, (arg, why) in _trust.UNLESS_ARGUMENT.items()
        ],
    )
    return (
        f"Default `imports.allow`: {allow}.\n\n"
        f"Never callable, trusted or not: {blocked} (and their submodules).\n\n"
        "Refused unless the file is trusted (`imports: {trust: true}` or `--trust`):\n\n"
        f"{loaders}\n"
        "Refused only with one argument, unless the file is trusted:\n\n"
        f"{arguments}"
    )


# -- the benchmark results --------------------------------------------------------------------


def results_page(text):
    """``RESULTS.md`` without its own title: its sections (``##``) sit under the performance
    page's title."""
    lines = text.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join(lines) + "\n"


# -- Sphinx -----------------------------------------------------------------------------------


def write_if_changed(path, text):
    """Write ``text`` to ``path`` unless it already holds exactly that."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    path.write_text(text, encoding="utf-8")


def generate(app):
    """Write every generated page (Sphinx's ``builder-inited`` event)."""
    import taskdml

    GENERATED.mkdir(exist_ok=True)
    write_if_changed(GENERATED / "pipeline_schema.md", schema_page(taskdml.schema()))
    write_if_changed(GENERATED / "merge_rules.md", merge_rules_page())
    write_if_changed(GENERATED / "trust.md", trust_page())
    write_if_changed(GENERATED / "results.md", results_page(RESULTS.read_text(encoding="utf-8")))


def guides_toctree(srcdir):
    """The home page's toctree of ``docs/guides/``, or ``""`` while that folder has no page
    (a toctree glob that matches nothing is a warning, which fails the build)."""
    guides = Path(srcdir) / "guides"
    pages = sorted(guides.glob("*.md")) if guides.is_dir() else []
    if not pages:
        return ""
    if (guides / "index.md").exists():
        options, entry = ":hidden:", "guides/index"
    else:
        options, entry = ":hidden:\n:glob:", "guides/*"
    return f"\n```{{toctree}}\n{options}\n\n{entry}\n```\n"


def add_guides(app, docname, source):
    """Append the guides' toctree to the home page (Sphinx's ``source-read`` event)."""
    if docname == app.config.root_doc:
        source[0] += guides_toctree(app.srcdir)


def reread_home(app, env, added, changed, removed):
    """Read the home page again on every build (Sphinx's ``env-get-outdated`` event): its
    guides' toctree depends on which files ``docs/guides/`` holds, not on its own source."""
    return [app.config.root_doc]


def setup(app):
    app.connect("builder-inited", generate)
    app.connect("source-read", add_guides)
    app.connect("env-get-outdated", reread_home)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
