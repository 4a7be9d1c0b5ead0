"""Mutated pipeline files: each validates, or is refused with exit 3 and a location — never a
traceback. The mutations are seeded edits of the example pipelines' text, of the kinds people
make: a line lost, doubled or moved, indentation off, a word mistyped, a value of the wrong
type, a file cut short, a stray character."""

import random
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(ROOT.glob("pipelines/*.yaml")) + sorted(ROOT.glob("pipelines/*/pipeline.yaml"))
MUTANTS = 240
VALUES = ["[1, 2]", "{}", "null", "-1", "1e309", '"x"', "true", "0", "''", "{a: 1}", "[]"]
LOCATION = re.compile(r":\d+:\d+: |line \d+")


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


MUTATIONS = [_lose, _double, _move, _indent, _mistype, _retype, _cut, _stray]


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


@pytest.mark.parametrize(("example", "text"), list(_mutants()))
def test_a_mutated_pipeline_file_validates_or_names_where_it_is_wrong(example, text, tmp_path):
    """`taskdml validate` on the mutant exits 0, or 3 with file:line:column — no traceback."""
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
        assert LOCATION.search(result.output), result.output
