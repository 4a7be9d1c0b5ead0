"""A pipeline file cannot run code it does not show: deserialisers and code loaders are
refused, wherever they come from, unless the file is trusted like code."""

import pickle
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from taskdml import PipelineError, loads_pipeline

# (the callable, the modules the file allows, its arguments)
GADGETS = [
    ("numpy:load", None, {"file": "evil.npy", "allow_pickle": True}),
    ("numpy.lib.npyio:load", ["numpy.*"], {"file": "evil.npy", "allow_pickle": True}),
    ("numpy.lib.format:read_array", ["numpy.*"], {"fp": "evil.npy", "allow_pickle": True}),
    ("numpy.ctypeslib:load_library", ["numpy.*"], {"libname": "evil", "loader_path": "."}),
    ("numpy.f2py:run_main", ["numpy.*"], {"comline_list": ["-c", "evil.f90"]}),
    ("numpy.testing:measure", ["numpy.*"], {"code_str": "print(1)"}),
    ("pandas:read_pickle", ["pandas"], {"filepath_or_buffer": "evil.pkl"}),
    ("pandas:eval", ["pandas"], {"expr": "1 + 1"}),
    ("joblib:load", ["joblib"], {"filename": "evil.joblib"}),
    ("pickle:loads", ["pickle"], {"data": "x"}),
    ("cloudpickle:loads", ["cloudpickle"], {}),
    ("marshal:loads", ["marshal"], {}),
    ("importlib:import_module", ["importlib"], {"name": "os"}),
    ("ctypes:CDLL", ["ctypes"], {"name": "libc.so.6"}),
    ("yaml:unsafe_load", ["yaml"], {"stream": "x"}),
    ("skops.io:load", ["skops.*"], {"file": "evil.skops", "trusted": ["builtins.eval"]}),
    ("taskdml.runs:load_model", None, {"run_path": ".", "step": "model"}),
    (
        "sklearn.utils._testing:assert_run_python_script_without_output",
        None,
        {"source_code": "import os"},
    ),
]


def _file(target, allow, arguments, trust=None):
    imports = {}
    if allow is not None:
        imports["allow"] = allow
    if trust is not None:
        imports["trust"] = trust
    lines = ["taskdml: 1", "name: gadget"]
    if imports:
        lines.append(f"imports: {imports!r}".replace("'", '"').replace("True", "true"))
    lines += ["steps:", "  load:", f"    call: {target}", f"    with: {arguments!r}"]
    return "\n".join(lines).replace("True", "true") + "\n"


@pytest.mark.parametrize(("target", "allow", "arguments"), GADGETS, ids=[g[0] for g in GADGETS])
def test_code_loaders_are_refused_unless_the_file_is_trusted(target, allow, arguments):
    """Every known gadget is an invalid pipeline naming the step and saying how to trust it."""
    with pytest.raises(PipelineError) as refused:
        loads_pipeline(_file(target, allow, arguments))
    message = str(refused.value)
    assert "steps.load.call" in message
    assert "imports: {trust: true}" in message
    assert target in message


# What imports.trust does not lift: the checks of the arguments and of the name itself.
TRUSTED_FAILURES = {
    "pickle:loads": "'pickle:loads' takes no argument 'data'",  # its argument is positional
    **(
        {}
        if hasattr(np.lib.npyio, "load")
        else {"numpy.lib.npyio:load": "module 'numpy.lib.npyio' has no attribute 'load'"}
    ),  # numpy 2 keeps load at the top level only
}
TRUSTED = [g for g in GADGETS if g[0].split(":")[0].split(".")[0] in ("numpy", "pickle", "marshal")]


@pytest.mark.parametrize(
    ("target", "allow", "arguments"), [g for g in TRUSTED if g[0] not in TRUSTED_FAILURES]
)
def test_a_trusted_file_may_name_them(target, allow, arguments):
    """imports.trust: true lets the same file validate (it is code, and says so)."""
    pipeline = loads_pipeline(_file(target, allow, arguments, trust=True))
    assert pipeline.name == "gadget"


@pytest.mark.parametrize(
    ("target", "allow", "arguments"), [g for g in TRUSTED if g[0] in TRUSTED_FAILURES]
)
def test_trust_does_not_lift_the_other_checks(target, allow, arguments):
    """A trusted file that names a callable with an argument it does not take, or a name its
    module lacks, is still invalid, for that reason and not for trust."""
    with pytest.raises(PipelineError, match=re.escape(TRUSTED_FAILURES[target])) as raised:
        loads_pipeline(_file(target, allow, arguments, trust=True))
    assert "trust" not in str(raised.value)


@pytest.mark.parametrize(
    ("target", "arguments"),
    [
        ("numpy:load", {"file": "data.npy"}),
        ("numpy:load", {"file": "data.npy", "allow_pickle": False}),
        ("numpy:ones", {"shape": 3}),
        ("scipy.stats:loguniform", {"a": 1.0e-4, "b": 1.0}),
    ],
)
def test_safe_calls_stay_allowed(target, arguments):
    """numpy.load without allow_pickle, and the default allow-list's own names, validate."""
    loads_pipeline(_file(target, None, arguments))


@pytest.mark.parametrize(
    ("target", "fragment"),
    [
        ("numpy.f2py:run_main", "outside imports.allow"),  # numpy's submodules: not by default
        ("scipy.io:loadmat", "outside imports.allow"),
        ("os:system", "never allowed"),
        ("subprocess:run", "never allowed"),
    ],
)
def test_the_default_allow_list_is_narrow(target, fragment):
    """The default allows numpy's top level and scipy's distributions, not their submodules;
    modules that run commands are never allowed."""
    with pytest.raises(PipelineError, match=fragment):
        loads_pipeline(_file(target, None, {}))


class _Marker:
    """Unpickling this creates a file: what a malicious .npy would do with a shell command."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def _evil_pipeline(tmp_path):
    """A pipeline that loads a crafted .npy with allow_pickle, and the file its payload
    creates when it runs."""
    marker = tmp_path / "payload-ran"
    evil = tmp_path / "evil.npy"
    np.save(evil, np.array([_Marker(str(marker))], dtype=object), allow_pickle=True)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        "taskdml: 1\nname: evil\nsteps:\n  load:\n    call: numpy:load\n"
        f"    with: {{file: '{evil}', allow_pickle: true}}\n"
    )
    return pipeline, marker


def test_the_numpy_load_gadget_does_not_run(tmp_path):
    """The issue's file — `call: numpy:load` with allow_pickle on a crafted .npy — exits 3 and
    its payload never runs, nor with --trust --dry-run, which says it trusts the file."""
    pipeline, marker = _evil_pipeline(tmp_path)
    refused = CliRunner().invoke(cli, ["run", str(pipeline), "--run-dir", str(tmp_path / "r")])
    assert refused.exit_code == 3, refused.output
    assert "allow_pickle=True can run code" in refused.output
    assert not marker.exists()
    dry = CliRunner().invoke(cli, ["run", str(pipeline), "--trust", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "trusting" in dry.output and "like code" in dry.output
    assert not marker.exists()


def test_the_numpy_load_gadget_runs_its_payload_once_trusted(tmp_path, cluster):
    """The positive control: run with --trust, the same file does run the payload (its file
    appears), so the crafted .npy is a real gadget and the refusal is what stops it."""
    pipeline, marker = _evil_pipeline(tmp_path)
    # unpickled here, the payload creates its file: the test builds what it claims
    assert pickle.loads(pickle.dumps(_Marker(str(tmp_path / "probe")))) is None
    assert (tmp_path / "probe").exists() and not marker.exists()
    trusted = CliRunner().invoke(
        cli,
        ["run", str(pipeline), "--trust", "--scheduler", cluster.scheduler_address,
         "--run-dir", str(tmp_path / "r")],
    )  # fmt: skip
    assert trusted.exit_code == 0, trusted.output
    assert "trusting" in trusted.output
    assert marker.exists()
