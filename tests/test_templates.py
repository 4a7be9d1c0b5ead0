"""`taskdml init`: what it writes, and what it refuses (exit 2, nothing written)."""

import pytest
from click.testing import CliRunner

from cli.main import cli
from taskdml import ProjectError, init_project


def _files(folder):
    return sorted(path for path in folder.rglob("*") if path.is_file())


def test_init_writes_the_project_with_the_package_named(tmp_path):
    """The files are written with the package's name in the pipeline, code, tests and README."""
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "proj"), "--package", "churn"])
    assert result.exit_code == 0, result.output
    assert "taskdml run pipeline.yaml" in result.output
    assert [p.relative_to(tmp_path).as_posix() for p in _files(tmp_path)] == [
        "proj/README.md",
        "proj/churn/__init__.py",
        "proj/churn/features.py",
        "proj/pipeline.yaml",
        "proj/pyproject.toml",
        "proj/tests/test_features.py",
    ]
    pipeline = (tmp_path / "proj" / "pipeline.yaml").read_text()
    assert "churn.features:add_interactions" in pipeline and '"churn.*"' in pipeline
    assert "{{package}}" not in "".join(p.read_text() for p in _files(tmp_path))


@pytest.mark.parametrize(
    ("package", "message"),
    [
        ("My-Project", "must be a lowercase Python identifier"),
        ("class", "must be a lowercase Python identifier"),
        ("json", "a module of that name is already installed"),
        ("sklearn", "a module of that name is already installed"),
    ],
)
def test_init_refuses_an_unusable_package_name(package, message, tmp_path):
    """A name that is not an identifier, or that an installed module would shadow: exit 2."""
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "proj"), "--package", package])
    assert result.exit_code == 2 and message in result.output, result.output
    assert "--package" in result.output and not _files(tmp_path)


def test_init_refuses_to_overwrite_and_writes_nothing(tmp_path):
    """One existing file stops the whole project from being written."""
    (tmp_path / "README.md").write_text("mine")
    with pytest.raises(ProjectError, match=r"README\.md already exist"):
        init_project(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["README.md"]
    assert (tmp_path / "README.md").read_text() == "mine"
    result = CliRunner().invoke(cli, ["init", str(tmp_path)])
    assert result.exit_code == 2 and "error: not writing the project into" in result.output
