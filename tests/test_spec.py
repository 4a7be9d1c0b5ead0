"""The pipeline file: parsing, interpolation, overrides, and every kind of invalid file."""

import json
import textwrap

import jsonschema
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import cli
from taskdml import PipelineError, dump_pipeline, loads_pipeline
from taskdml.pipeline._schema import SCHEMA

VALID = """\
taskdml: 1
name: demo
params: {seed: 0, alpha: 1.0e-4}
steps:
  data:
    call: taskdml.datasets:load_sklearn
    with: {name: iris}
  split:
    call: taskdml.datasets:train_test_split
    inputs: {data: data}
    with: {random_state: "${params.seed}"}
    outputs: [train, test]
  model:
    fit: sklearn.linear_model:SGDClassifier
    with: {alpha: "${params.alpha}"}
    inputs: {data: split.train}
  report:
    evaluate: [accuracy]
    inputs: {model: model, data: split.test}
"""

# (case id, the file, the line the message must name, a text the message must contain)
BROKEN = [
    ("yaml-syntax", "taskdml: 1\nname: [demo\nsteps: {}\n", 3, "not valid YAML"),
    ("yaml-indent", "taskdml: 1\nname: demo\n steps:\n  a: 1\n", 3, "not valid YAML"),
    ("python-tag", "taskdml: 1\nname: !!python/object/apply:os.system [ls]\nsteps: {}\n", 2, "tag"),
    ("not-a-mapping", "- taskdml: 1\n", 1, "mapping"),
    (
        "duplicate-key",
        VALID.replace("  report:", "  data:\n    call: numpy:ones\n  report:"),
        17,
        "given twice",
    ),
    ("missing-version", VALID.replace("taskdml: 1\n", ""), 1, "'taskdml'"),
    ("wrong-version", VALID.replace("taskdml: 1", "taskdml: 2"), 1, "taskdml"),
    ("top-level-typo", VALID.replace("params:", "parms:"), 3, "Did you mean 'params'"),
    ("steps-typo", VALID.replace("steps:", "stpes:"), 4, "Did you mean 'steps'"),
    (
        "step-key-typo",
        VALID.replace("    inputs: {data: data}", "    input: {data: data}"),
        10,
        "Did you mean 'inputs'",
    ),
    ("with-typo", VALID.replace("with: {alpha:", "wiht: {alpha:"), 15, "Did you mean 'with'"),
    (
        "two-kinds",
        VALID.replace("    evaluate: [accuracy]", "    evaluate: [accuracy]\n    call: numpy:mean"),
        17,
        "exactly one of",
    ),
    ("no-kind", VALID.replace("    evaluate: [accuracy]\n", ""), 17, "exactly one of"),
    ("bad-step-name", VALID.replace("  report:", "  Report-1:"), 17, "not allowed"),
    (
        "unknown-step-ref",
        VALID.replace("inputs: {data: split.train}", "inputs: {data: splt.train}"),
        16,
        "Did you mean 'split'",
    ),
    (
        "unknown-output-ref",
        VALID.replace("inputs: {data: split.train}", "inputs: {data: split.trian}"),
        16,
        "Did you mean 'train'",
    ),
    (
        "self-ref",
        VALID.replace("inputs: {data: split.train}", "inputs: {data: model}"),
        16,
        "own output",
    ),
    (
        "cycle",
        VALID.replace("    inputs: {data: data}\n", "    inputs: {data: report}\n"),
        10,
        "cycle",
    ),
    (
        "disallowed-import",
        VALID.replace("taskdml.datasets:load_sklearn", "os:system"),
        6,
        "imports.allow",
    ),
    (
        "outside-allowlist",
        VALID.replace("taskdml.datasets:load_sklearn", "json:loads"),
        6,
        "imports.allow",
    ),
    (
        "missing-module",
        VALID.replace("taskdml.datasets:load_sklearn", "sklearn.nosuch:thing"),
        6,
        "no module named",
    ),
    (
        "missing-attr",
        VALID.replace("sklearn.linear_model:SGDClassifier", "sklearn.linear_model:SGDClasifier"),
        14,
        "Did you mean 'SGDClassifier'",
    ),
    (
        "callable-syntax",
        VALID.replace("sklearn.linear_model:SGDClassifier", "sklearn.linear_model.SGDClassifier"),
        14,
        "module:attr",
    ),
    (
        "estimator-param-typo",
        VALID.replace("with: {alpha:", "with: {alpah:"),
        15,
        "Did you mean 'alpha'",
    ),
    (
        "call-kwarg-typo",
        VALID.replace("with: {name: iris}", "with: {nmae: iris}"),
        7,
        "Did you mean 'name'",
    ),
    (
        "wrong-type-inputs",
        VALID.replace("inputs: {data: data}", "inputs: [data]"),
        10,
        "expected a mapping",
    ),
    (
        "wrong-type-outputs",
        VALID.replace("outputs: [train, test]", "outputs: train"),
        12,
        "expected a list",
    ),
    (
        "wrong-type-parallel",
        VALID.replace(
            "    inputs: {data: split.train}",
            "    inputs: {data: split.train}\n    parallel: {epochs: many}",
        ),
        17,
        "expected an integer",
    ),
    (
        "bad-strategy",
        VALID.replace(
            "    inputs: {data: split.train}",
            "    inputs: {data: split.train}\n    parallel: {strategy: snyc}",
        ),
        17,
        "Did you mean 'sync'",
    ),
    (
        "bad-sync-every",
        VALID.replace(
            "    inputs: {data: split.train}",
            "    inputs: {data: split.train}\n    parallel: {sync_every: 0}",
        ),
        17,
        "expected an integer >= 1 or 'auto', found 0",
    ),
    (
        "unknown-metric",
        VALID.replace("evaluate: [accuracy]", "evaluate: [acuracy]"),
        18,
        "Did you mean 'accuracy'",
    ),
    (
        "fit-outputs",
        VALID.replace(
            "    inputs: {data: split.train}", "    inputs: {data: split.train}\n    outputs: [m]"
        ),
        17,
        "outputs are fixed",
    ),
    (
        "fit-missing-data",
        VALID.replace("    inputs: {data: split.train}", "    inputs: {train: split.train}"),
        16,
        "needs input 'data'",
    ),
    (
        "key-for-other-kind",
        VALID.replace(
            "    evaluate: [accuracy]", "    evaluate: [accuracy]\n    parallel: {epochs: 2}"
        ),
        19,
        "does not apply",
    ),
    (
        "unknown-interpolation",
        VALID.replace("${params.seed}", "${params.sed}"),
        11,
        "Did you mean 'seed'",
    ),
    (
        "interpolation-cycle",
        VALID.replace("seed: 0,", "seed: '${params.alpha}',").replace(
            "alpha: 1.0e-4", "alpha: '${params.seed}'"
        ),
        3,
        "cycle",
    ),
    (
        "missing-env",
        VALID.replace("${params.seed}", "${oc.env:TASKDML_TEST_SURELY_UNSET}"),
        11,
        "not set",
    ),
    (
        "search-without-budget",
        VALID.replace(
            "    evaluate: [accuracy]\n    inputs: {model: model, data: split.test}",
            "    search: sklearn.linear_model:SGDClassifier\n    method: asha\n"
            "    space: {alpha: [0.1, 0.01]}\n    inputs: {data: split.train}",
        ),
        17,
        "needs budget.trials",
    ),
    (
        "grid-with-distribution",
        VALID.replace(
            "    evaluate: [accuracy]\n    inputs: {model: model, data: split.test}",
            "    search: sklearn.linear_model:SGDClassifier\n    method: grid\n"
            "    space: {alpha: {loguniform: [1.0e-5, 1.0]}}\n    inputs: {data: split.train}",
        ),
        20,
        "needs lists of values",
    ),
    (
        "bad-cluster-key",
        VALID.replace("params:", "cluster: {n_wrkers: 2}\nparams:"),
        3,
        "Did you mean 'n_workers'",
    ),
    ("negative-workers", VALID.replace("params:", "cluster: {n_workers: 0}\nparams:"), 3, ">= 1"),
]


def _write(tmp_path, text):
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("case,text,line,fragment", BROKEN, ids=[case[0] for case in BROKEN])
def test_broken_file_is_refused_before_anything_runs(tmp_path, case, text, line, fragment):
    """A broken file exits 3 naming file:line and the problem, no traceback, running nothing."""
    path = _write(tmp_path, text)
    runs = tmp_path / "runs"
    result = CliRunner().invoke(cli, ["run", str(path), "--run-dir", str(runs)])
    assert result.exit_code == 3, result.output
    assert f"{path}:{line}:" in result.output, result.output
    assert fragment in result.output
    assert "Traceback" not in result.output
    assert not runs.exists()


def test_each_broken_case_breaks_a_valid_file():
    """VALID loads, and every broken case changes it, so each failure above is the change's."""
    assert loads_pipeline(VALID).name == "demo"
    assert all(text != VALID for _, text, _, _ in BROKEN)


def test_error_names_the_key_path(tmp_path):
    """The message says which key is wrong, not only the line."""
    with pytest.raises(PipelineError, match=r"steps\.model\.with\.alpah"):
        loads_pipeline(VALID.replace("with: {alpha:", "with: {alpah:"))


def test_every_problem_is_reported_at_once():
    """Two independent typos give two lines."""
    text = VALID.replace("params:", "parms:").replace("steps:", "stpes:")
    with pytest.raises(PipelineError) as info:
        loads_pipeline(text)
    assert "parms" in str(info.value) and "stpes" in str(info.value)


def test_interpolation_keeps_types_and_formats_strings(monkeypatch):
    """A whole ${...} keeps the value's type; inside text it is formatted; env vars resolve."""
    monkeypatch.setenv("TASKDML_TEST_SEED", "7")
    text = VALID.replace(
        "params: {seed: 0, alpha: 1.0e-4}",
        "params: {seed: '${oc.env:TASKDML_TEST_SEED}', alpha: 1.0e-4, tag: 'a-${params.alpha}'}",
    )
    pipeline = loads_pipeline(text)
    assert pipeline.step("split").with_["random_state"] == 7
    assert pipeline.params["tag"] == "a-0.0001"
    assert pipeline.step("model").with_["alpha"] == 1e-4


def test_path_resolver_is_relative_to_the_pipeline_file(tmp_path, monkeypatch):
    """${path:...} is the file's directory joined with the path, absolute, whatever the working
    directory; text without a file resolves against the working directory."""
    from taskdml import load_pipeline

    folder = tmp_path / "project"
    folder.mkdir()
    text = VALID.replace(
        "params: {seed: 0, alpha: 1.0e-4}",
        "params: {seed: 0, alpha: 1.0e-4, table: '${path:data/t.csv}', here: '${path:}'}",
    )
    (folder / "p.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    pipeline = load_pipeline(folder / "p.yaml")
    assert pipeline.params["table"] == str(folder.resolve() / "data" / "t.csv")
    assert pipeline.params["here"] == str(folder.resolve())
    assert loads_pipeline(text).params["table"] == str(tmp_path.resolve() / "data" / "t.csv")


@pytest.mark.parametrize(
    "overrides,check",
    [
        (["seed=3"], lambda p: p.step("split").with_["random_state"] == 3),
        (["params.alpha=1e-2"], lambda p: p.step("model").with_["alpha"] == 0.01),
        (["steps.data.with.name=wine"], lambda p: p.step("data").with_["name"] == "wine"),
        (["+extra=[1, 2]"], lambda p: p.params["extra"] == (1, 2)),
        (["++seed=5"], lambda p: p.params["seed"] == 5),
        (["~params.alpha", "+alpha=0.5"], lambda p: p.step("model").with_["alpha"] == 0.5),
        (["+cluster.n_workers=3"], lambda p: p.cluster["n_workers"] == 3),
    ],
)
def test_overrides_follow_hydra_grammar(overrides, check):
    """key=value, +key=value, ++key=value and ~key change the file before interpolation."""
    assert check(loads_pipeline(VALID, overrides=overrides))


@pytest.mark.parametrize(
    "override,fragment",
    [
        ("sed=3", "Did you mean 'seed'"),
        ("+seed=3", "already exists"),
        ("~nothing", "cannot delete"),
        ("=3", "expected key=value"),
        ("seed", "expected key=value"),
        ("steps.model.with.alpha=high", "'alpha' parameter of SGDClassifier must be"),
    ],
)
def test_bad_override_is_refused(override, fragment):
    """A wrong override names itself and the fix."""
    with pytest.raises(PipelineError, match=fragment.replace("(", r"\(")):
        loads_pipeline(
            VALID.replace('with: {alpha: "${params.alpha}"}', "with: {alpha: 0.1}"),
            overrides=[override],
        )


def test_bad_override_exits_3_on_the_cli(tmp_path):
    """The CLI shows the override in the error, exit code 3."""
    result = CliRunner().invoke(cli, ["validate", str(_write(tmp_path, VALID)), "sed=3"])
    assert result.exit_code == 3
    assert "override 'sed=3'" in result.output


def test_validate_and_show(tmp_path):
    """validate says valid; show renders text, mermaid, dot and json."""
    path = str(_write(tmp_path, VALID))
    assert (
        "valid pipeline 'demo' with 4 steps" in CliRunner().invoke(cli, ["validate", path]).output
    )
    text = CliRunner().invoke(cli, ["show", path]).output
    assert "split" in text and "<- data" in text
    mermaid = CliRunner().invoke(cli, ["show", path, "--format", "mermaid"]).output
    dot = CliRunner().invoke(cli, ["show", path, "--format", "dot"]).output
    # One edge per input of VALID, labelled "output -> argument", written out by hand:
    edges = [
        ("data", "split", "result -> data"),
        ("split", "model", "train -> data"),
        ("model", "report", "model -> model"),
        ("split", "report", "test -> data"),
    ]
    assert mermaid.startswith("flowchart TD")
    assert sorted(line.strip() for line in mermaid.splitlines() if "-->" in line) == sorted(
        f"{source} -->|{label}| {target}" for source, target, label in edges
    )
    assert dot.startswith('digraph "demo" {')
    assert sorted(
        line.strip()
        for line in dot.splitlines()
        if " -> " in line
        and "label" in line
        and "[label=" in line
        and line.strip().split()[1] == "->"
    ) == sorted(f'{source} -> {target} [label="{label}"];' for source, target, label in edges)
    shown = json.loads(CliRunner().invoke(cli, ["show", path, "--format", "json"]).output)
    assert shown["order"] == ["data", "split", "model", "report"]


def test_dry_run_runs_nothing(tmp_path):
    """--dry-run prints the plan and writes no run directory."""
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        cli, ["run", str(_write(tmp_path, VALID)), "--dry-run", "--run-dir", str(runs)]
    )
    assert result.exit_code == 0 and "dry run" in result.output
    assert not runs.exists()


def test_published_schema_accepts_valid_files_and_is_a_json_schema():
    """`taskdml schema` is a valid JSON Schema that accepts the resolved example."""
    published = json.loads(CliRunner().invoke(cli, ["schema"]).output)
    jsonschema.Draft202012Validator.check_schema(published)
    jsonschema.validate(loads_pipeline(VALID).to_dict(), published)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"taskdml": 1, "name": "x", "steps": {"a": {"cal": "x:y"}}}, SCHEMA)


def test_the_parallel_block_is_written_from_the_engines_options_table():
    """Every pipeline option of the engine's table is a key of a step's ``parallel`` block,
    with the table's doc line; the renamed keys are there, marked deprecated."""
    from taskdml.parallel.engine import _options
    from taskdml.pipeline._schema import MODE_KEYS

    block = SCHEMA["properties"]["steps"]["additionalProperties"]["properties"]["parallel"]
    for name, option in _options.OPTIONS.items():
        if option.modes:
            assert block["properties"][name]["description"] == option.doc
            assert all(name in MODE_KEYS[mode] for mode in option.modes)
        else:
            assert name not in block["properties"]
    for old, new in _options.RENAMED.items():
        assert block["properties"][old]["deprecated"] is True
        assert new in block["properties"][old]["description"]


_values = st.one_of(
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(codec="utf-8", exclude_characters="$\\"), max_size=12),
    st.booleans(),
)


@settings(max_examples=40, deadline=None)
@given(
    params=st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), _values, max_size=5
    )
)
def test_dump_and_load_round_trip(params):
    """A pipeline dumped to YAML loads back equal, whatever its params."""
    pipeline = loads_pipeline(VALID)
    text = dump_pipeline(pipeline)
    with_params = loads_pipeline(
        text.replace(
            "params:\n",
            "params:\n"
            + textwrap.indent("".join(f"{k}: {json.dumps(v)}\n" for k, v in params.items()), "  "),
            1,
        )
    )
    assert loads_pipeline(dump_pipeline(with_params)) == with_params
    assert loads_pipeline(text) == pipeline


# Files that would hurt the machine that loads them: each is a few kilobytes, and is refused
# while it is loaded, with its line and column (the params block of VALID, written out, starts
# on line 3; the hostile lines start on line 6).
def _hostile(*lines):
    params = "params:\n  seed: 0\n  alpha: 1.0e-4\n" + "".join(f"  {line}\n" for line in lines)
    return VALID.replace("params: {seed: 0, alpha: 1.0e-4}\n", params)


def _laughs():
    """A 'billion laughs': each anchor holds nine aliases of the one before, 9**10 values."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * 9) + "]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return _hostile(*lines)


def _chain(n, value, first="1"):
    """*n* params, each *value* with a reference to the one before it in place of ``{0}``."""
    return _hostile(
        f"p0: {first}", *(f"p{k}: {value.format(f'${{params.p{k - 1}}}')}" for k in range(1, n))
    )


DEEP = 5000
HOSTILE = [
    ("alias-bomb", _laughs(), 11, 12, "billion laughs"),
    (
        "merge-key-chain",
        _hostile("m0: &m0 {k: 1}", *(f"m{k}: &m{k} {{<<: *m{k - 1}}}" for k in range(1, 200))),
        104,
        18,
        "alias *m97 makes the file nest",
    ),
    ("flow-lists", _hostile("deep: " + "[" * DEEP + "]" * DEEP), 6, 107, "more than 100 levels"),
    ("flow-maps", _hostile("deep: " + "{a: " * DEEP + "1" + "}" * DEEP), 6, 401, "more than 100"),
    ("block-lists", _hostile("deep:", "  " + "- " * DEEP + "1"), 7, 201, "more than 100 levels"),
    (
        "block-maps",
        _hostile(*(" " * depth + "a:" for depth in range(200)), " " * 200 + "1"),
        105,
        102,
        "more than 100 levels",
    ),
    ("alias-in-itself", _hostile("loop: &loop [1, *loop]"), 6, 19, "inside its own anchor &loop"),
    (
        "deep-through-aliases",
        _hostile("d0: &d0 " + "[" * 60 + "]" * 60, "d1: " + "[" * 60 + "*d0" + "]" * 60),
        7,
        67,
        "alias *d0 makes the file nest",
    ),
    ("big-integer", _hostile("big: " + "7" * 5000), 6, 8, "reads as an integer"),
    ("hex-integer", _hostile("big: 0x" + "f" * 5000), 6, 8, "too many digits"),
    ("impossible-date", _hostile("when: 2024-02-30"), 6, 9, "reads as a date"),
    (
        "interpolation-doubles-strings",
        _chain(40, "'{0}{0}'", first="x" * 2000),
        8,
        3,
        "write more than 1,000,000 characters",
    ),
    (
        "interpolation-doubles-lists",
        _chain(40, "['{0}', '{0}']"),
        9,
        24,
        "bring more than 100,000 values",
    ),
    ("interpolation-chain", _chain(1000, "'{0}'"), 7, 3, "levels deep at ${params.p0}"),
    (
        "interpolation-nests",
        _chain(40, "[" * 60 + "'{0}'" + "]" * 60),
        7,
        44,
        "nest more than 100 levels deep",
    ),
]


@pytest.mark.parametrize("case,text,line,column,fragment", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_a_file_that_would_exhaust_the_machine_is_refused_where_it_starts(
    tmp_path, case, text, line, column, fragment
):
    """Alias bombs, deep nesting, unreadable scalars and exploding references exit 3 with
    file:line:column, the bound crossed and the fix — no RecursionError, no traceback."""
    assert len(text) < 30_000  # a small file
    path = _write(tmp_path, text)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output
    where = f"{path}:{line}:{column}: " if line else f"{path}:"
    assert where in result.output and fragment in result.output, result.output


@pytest.mark.parametrize("case", ["alias-bomb", "flow-lists", "block-lists"])
def test_the_installed_command_refuses_a_bomb_within_bounded_memory(tmp_path, case):
    """`taskdml validate` in a process limited to 2 GiB of address space refuses the file with
    exit 3 (before the bounds, the alias bomb took 3.6 GB and was still running after 60 s)."""
    import resource
    import subprocess
    import sys
    from pathlib import Path

    text = next(text for name, text, *_ in HOSTILE if name == case)
    path = _write(tmp_path, text)

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    done = subprocess.run(
        [str(Path(sys.executable).with_name("taskdml")), "validate", str(path)],
        capture_output=True,
        text=True,
        preexec_fn=limit_memory,
        env={"PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"},
    )
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{path}:" in done.stderr and "more than" in done.stderr


def test_the_bounds_leave_room_for_real_files():
    """A value nested to the limit, an alias to a large anchor, and a chain of references just
    inside the bounds load, so that the bounds refuse only what crosses them."""
    from taskdml.pipeline._yaml import MAX_ALIAS_VALUES, MAX_DEPTH

    nested = "[" * (MAX_DEPTH - 2) + "1" + "]" * (MAX_DEPTH - 2)  # under the file and params
    assert loads_pipeline(_hostile(f"deep: {nested}")).params["deep"] is not None
    with pytest.raises(PipelineError, match="more than 100 levels deep"):
        loads_pipeline(_hostile(f"deep: [{nested}]"))
    items = ", ".join(["0"] * (MAX_ALIAS_VALUES // 4))
    big = loads_pipeline(_hostile(f"big: &big [{items}]", "copies: [*big, *big, *big]"))
    assert len(big.params["copies"]) == 3 and len(big.params["copies"][2]) == MAX_ALIAS_VALUES // 4
    chain = loads_pipeline(_chain(MAX_DEPTH - 3, "'{0}'"))
    assert chain.params[f"p{MAX_DEPTH - 4}"] == 1


def test_anchors_aliases_and_merge_keys_work_as_in_yaml():
    """Ordinary anchors load as copies, and a merge key's values give way to the keys written
    beside it (YAML's merge rule), which are not 'given twice'; writing one twice still is."""
    text = VALID.replace(
        "params: {seed: 0, alpha: 1.0e-4}\n",
        "params:\n  base: &base {seed: 0, alpha: 1.0e-4}\n  seed: 0\n  alpha: 1.0e-4\n"
        "  tuned: {<<: *base, alpha: 0.5}\n  both: {<<: [{alpha: 1}, {seed: 2}]}\n"
        "  grid: &grid [1, 2]\n  again: *grid\n",
    )
    params = loads_pipeline(text).params
    assert params["tuned"] == {"seed": 0, "alpha": 0.5}
    assert params["both"] == {"alpha": 1, "seed": 2}
    assert params["again"] == (1, 2)
    with pytest.raises(PipelineError, match=r":7:34: params\.tuned\.alpha: key 'alpha' is given"):
        loads_pipeline(text.replace("alpha: 0.5}", "alpha: 0.5, alpha: 1}"))
