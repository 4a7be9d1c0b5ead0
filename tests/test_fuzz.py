"""Mutated pipeline files, with an oracle for what `taskdml validate` must answer.

Two kinds of mutants of the example pipelines:

- **known invalid**: the example read, changed in a way that breaks a rule of the format (an
  unknown key, a wrong type, a reference to no step, a cycle, a broken ``${...}``) or that would
  exhaust the machine (an alias bomb, nesting 5,000 deep, references that double), and written
  back. Every one must be refused: exit 3, a clean message with file:line:column and the reason.
  A validator that accepted everything fails here; the unchanged examples, written back the same
  way, must validate, so a validator that refused everything fails too.
- **edits**: seeded edits of the text, of the kinds people make: a line lost, doubled or moved,
  indentation off, a word mistyped, a value of the wrong type, a file cut short, a stray
  character, a comment added. Their validity is unknown in general, so they may exit 0 or 3,
  never crash (no traceback, no exit 1); where PyYAML (the oracle, reading YAML 1.2 floats as
  taskdml does) refuses the text, they must exit 3, and where it reads the same document as
  the example's, with no key given twice, they must exit 0.
"""

import copy
import random
import re
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(ROOT.glob("pipelines/*.yaml")) + sorted(ROOT.glob("pipelines/*/pipeline.yaml"))
MUTANTS = 240
VALUES = ["[1, 2]", "{}", "null", "-1", "1e309", '"x"', "true", "0", "''", "{a: 1}", "[]"]
LOCATION = re.compile(r":(\d+):\d+: ")


class _YAML12(yaml.SafeLoader):
    """PyYAML's safe loader, reading ``1e-3`` as a float as YAML 1.2 (and taskdml) does."""


_YAML12.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _validate(example, text, tmp_path):
    """`taskdml validate` on *text* written where *example* is, with the files next to it;
    checks what every answer must be, and returns ``(exit code, output, path)``."""
    for sibling in example.parent.iterdir():  # a project's package and data files come along
        if sibling.is_dir() and example.name == "pipeline.yaml":
            shutil.copytree(sibling, tmp_path / sibling.name)
        elif sibling.suffix in (".csv", ".parquet") and example.name == "pipeline.yaml":
            shutil.copy(sibling, tmp_path / sibling.name)
    path = tmp_path / example.name
    path.write_text(text)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert isinstance(result.exception, (SystemExit, type(None))), result.output
    assert "Traceback" not in result.output
    assert result.exit_code in (0, 3), result.output
    if result.exit_code == 3:
        assert f"{path}:" in result.output and LOCATION.search(result.output), result.output
    return result.exit_code, result.output, path


# Known-invalid mutants: each takes the example's document and a random generator, changes the
# document, and returns the text with what the refusal must say and, for text injected into the
# file, the lines the location must fall on.


def _dumped(data):
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000)


def _references(data):
    """Each step's inputs, as step names."""
    return {
        name: {
            value.split(".")[0]
            for value in (spec.get("inputs") or {}).values()
            if isinstance(value, str)
        }
        for name, spec in data["steps"].items()
    }


def _with_inputs(data):
    return [name for name, spec in data["steps"].items() if isinstance(spec.get("inputs"), dict)]


def _unknown_section(data, rng):
    section = rng.choice([key for key in data if key != "taskdml"])
    data[section + rng.choice(["s", "_", "x"])] = data[section]
    return _dumped(data), "unknown key", None


def _unknown_step_key(data, rng):
    step = rng.choice(list(data["steps"]))
    data["steps"][step][rng.choice(["inptus", "withh", "colour", "output", "fits"])] = 1
    return _dumped(data), "unknown key", None


def _wrong_type(data, rng):
    key, value = rng.choice([("name", ["x"]), ("steps", ["x"]), ("taskdml", "1"), ("inputs", 5)])
    if key == "inputs":
        data["steps"][rng.choice(_with_inputs(data))]["inputs"] = value
    else:
        data[key] = value
    return _dumped(data), "expected", None


def _dangling(data, rng):
    inputs = data["steps"][rng.choice(_with_inputs(data))]["inputs"]
    inputs[rng.choice(list(inputs))] = "no_such_step"
    return _dumped(data), "unknown step 'no_such_step'", None


def _cycle(data, rng):
    """A step reads from one that depends on it (or, if none does, from itself)."""
    step = rng.choice(_with_inputs(data))
    references = _references(data)
    later, grown = {step}, True
    while grown:
        before = len(later)
        later |= {name for name, used in references.items() if used & later}
        grown = len(later) > before
    later.discard(step)
    inputs = data["steps"][step]["inputs"]
    inputs[rng.choice(list(inputs))] = rng.choice(sorted(later)) if later else step
    return _dumped(data), "cycle" if later else "own output", None


def _broken_reference(data, rng):
    params = data.setdefault("params", {})
    text, fragment = rng.choice(
        [
            ("${params.no_such_value}", "does not exist"),
            ("${oc.nope:x}", "unknown resolver"),
            ("${params.fuzz_loop}", "interpolation cycle"),
        ]
    )
    params["fuzz_loop"] = "${params.fuzz_loop}" if "cycle" in fragment else 0
    step = data["steps"][rng.choice(list(data["steps"]))]
    step["description"] = f"uses {text}"
    return _dumped(data), fragment, None


def _hostile(lines, fragment):
    """A mutation that writes *lines* into the file's params."""

    def mutate(data, rng):
        data.setdefault("params", {})["fuzz_hostile"] = "HOSTILE"
        text = _dumped(data)
        first = text[: text.index("  fuzz_hostile: HOSTILE")].count("\n") + 1
        written = "".join(f"  {line}\n" for line in lines)
        return (
            text.replace("  fuzz_hostile: HOSTILE\n", written),
            fragment,
            (first, first + len(lines)),
        )

    mutate.__name__ = f"_hostile_{fragment.split()[0]}"
    return mutate


DEEP = 5000
_LAUGHS = ["a0: &a0 [" + ", ".join(["lol"] * 9) + "]"] + [
    f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)
]
INVALID = [
    _unknown_section,
    _unknown_step_key,
    _wrong_type,
    _dangling,
    _cycle,
    _broken_reference,
    _hostile(_LAUGHS, "billion laughs"),
    _hostile(["deep: " + "[" * DEEP + "]" * DEEP], "levels deep"),
    _hostile(["deep: " + "{a: " * DEEP + "1" + "}" * DEEP], "levels deep"),
    _hostile(["deep:", "  " + "- " * DEEP + "1"], "levels deep"),
    _hostile(["loop: &loop {again: *loop}"], "inside its own anchor"),
    _hostile(
        ["d0: x"] + [f"d{k}: ${{params.d{k - 1}}}${{params.d{k - 1}}}" for k in range(1, 40)],
        "references bring more than",
    ),
]


def _known_invalid():
    for number, example in enumerate(EXAMPLES):
        for kind, mutate in enumerate(INVALID):
            yield pytest.param(
                example,
                mutate,
                random.Random(number * 100 + kind),
                id=f"{example.parent.name}-{example.stem}-{mutate.__name__.strip('_')}",
            )


@pytest.mark.parametrize(("example", "mutate", "rng"), list(_known_invalid()))
def test_a_known_invalid_file_is_refused_with_the_reason(example, mutate, rng, tmp_path):
    """A file broken on purpose exits 3 with file:line:column and the reason (for text written
    into the file, a line of that text) — whatever the example it was made from."""
    data = yaml.load(example.read_text(), Loader=_YAML12)
    text, fragment, lines = mutate(copy.deepcopy(data), rng)
    code, output, _ = _validate(example, text, tmp_path)
    assert code == 3, f"accepted a file that is invalid ({mutate.__name__}):\n{text[:2000]}"
    assert fragment in output, output
    if lines is not None:
        assert any(lines[0] <= int(line) < lines[1] for line in LOCATION.findall(output)), output


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.parent.name}-{e.stem}" for e in EXAMPLES])
def test_an_example_written_back_validates(example, tmp_path):
    """The examples, read and written back as the known-invalid mutants are, validate: what
    refuses a mutant is its mutation."""
    data = yaml.load(example.read_text(), Loader=_YAML12)
    code, output, _ = _validate(example, _dumped(data), tmp_path)
    assert code == 0, output


# Edits of the text.


def _lose(lines, rng):
    del lines[rng.randrange(len(lines))]


def _double(lines, rng):
    i = rng.randrange(len(lines))
    lines.insert(i, lines[i])


def _move(lines, rng):
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]


def _indent(lines, rng):
    i = rng.randrange(len(lines))
    lines[i] = rng.choice(["  ", " ", "    "]) + lines[i] if rng.random() < 0.5 else lines[i][1:]


def _mistype(lines, rng):
    i = rng.randrange(len(lines))
    words = list(re.finditer(r"[A-Za-z_]{3,}", lines[i]))
    if words:
        word = rng.choice(words)
        cut = rng.randrange(word.start(), word.end())
        typo = rng.choice(["", "x", word.group()[::-1][:1]])
        lines[i] = lines[i][:cut] + typo + lines[i][cut + 1 :]


def _retype(lines, rng):
    i = rng.randrange(len(lines))
    if ":" in lines[i]:
        key = lines[i].split(":", 1)[0]
        lines[i] = f"{key}: {rng.choice(VALUES)}"


def _cut(lines, rng):
    if len(lines) > 1:  # an earlier mutation may have left one line
        del lines[rng.randrange(1, len(lines)) :]


def _stray(lines, rng):
    i = rng.randrange(len(lines))
    at = rng.randrange(len(lines[i]) + 1)
    lines[i] = (
        lines[i][:at]
        + rng.choice(["\t", "{", "]", "&", "*", "!", "%", "\u00e9", "'"])
        + lines[i][at:]
    )


def _comment(lines, rng):
    lines.insert(rng.randrange(len(lines) + 1), rng.choice(["", "  ", "    "]) + "# a note")


MUTATIONS = [_lose, _double, _move, _indent, _mistype, _retype, _cut, _stray, _comment]


def _mutants():
    rng = random.Random(12)
    for number in range(MUTANTS):
        example = EXAMPLES[number % len(EXAMPLES)]
        lines = example.read_text().splitlines()
        for _ in range(rng.randint(1, 3)):
            rng.choice(MUTATIONS)(lines, rng)
        yield pytest.param(
            example, "\n".join(lines) + "\n", id=f"{number}-{example.parent.name}-{example.stem}"
        )


def _expected(example, text):
    """What the oracle says an edit must give: ``{3}`` where PyYAML refuses the text, ``{0}``
    where it reads the example's own document with no key given twice, else ``{0, 3}``."""
    try:
        node = yaml.compose(text, Loader=_YAML12)
        data = yaml.load(text, Loader=_YAML12)
    except (yaml.YAMLError, ValueError):  # ValueError: a date or an integer Python cannot hold
        return {3}
    if data == yaml.load(example.read_text(), Loader=_YAML12) and not _twice(node):
        return {0}
    return {0, 3}


def _twice(node):
    """Whether a mapping under *node* gives a key twice."""
    if isinstance(node, yaml.MappingNode):
        keys = [key.value for key, _ in node.value if isinstance(key, yaml.ScalarNode)]
        return len(keys) != len(set(keys)) or any(_twice(value) for _, value in node.value)
    if isinstance(node, yaml.SequenceNode):
        return any(_twice(item) for item in node.value)
    return False


@pytest.mark.parametrize(("example", "text"), list(_mutants()))
def test_an_edited_pipeline_file_validates_or_names_where_it_is_wrong(example, text, tmp_path):
    """`taskdml validate` on an edit exits 0, or 3 with file:line:column — no traceback — and
    what the oracle expects where it knows."""
    code, output, _ = _validate(example, text, tmp_path)
    assert code in _expected(example, text), output
