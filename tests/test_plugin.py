"""The plugin as installed: what a plain pytest run sees of it so far."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pytest_agentdescent import __version__
from pytest_agentdescent.cli import main


def test_markers_are_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.evolve(weight=1.0, holdout=None):*",
                                 "@pytest.mark.evolve_guard:*"])


def test_marked_tests_run_under_strict_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.evolve(weight=2.0)
        def test_task():
            assert 1 + 1 == 2

        @pytest.mark.evolve_guard
        def test_guard():
            assert "SKILL"
        """
    )
    result = pytester.runpytest("--strict-markers")
    result.assert_outcomes(passed=2)


def test_plugin_is_loaded_through_its_entry_point(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--trace-config", "--co", "-q")
    result.stdout.fnmatch_lines(["*agentdescent*pytest_agentdescent*plugin*"])


def test_cli_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"agentdescent, version {__version__}"


def test_cli_console_script_help() -> None:
    script = Path(sys.executable).with_name("agentdescent")
    assert script.exists(), f"console script not installed next to {sys.executable}"
    completed = subprocess.run(
        [str(script), "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "Usage:" in completed.stdout
    assert "--version" in completed.stdout


@pytest.mark.parametrize(("args", "passed"), [
    (["-p", "no:randomly", "--evolve", "skills"], ("-p", "no:randomly")),
    (["-pno:junitxml", "-q", "-p", "myplugin"], ("-p", "no:junitxml", "-p", "myplugin")),
    (["-p", "pytest_agentdescent.probe", "-p", "no:agentdescent"], ()),
    (["-q", "--", "-p", "no:after_the_separator"], ()),
    (["--pdb", "-k", "p"], ()),
])
def test_the_children_get_the_p_options_of_the_command_line(
        args: list[str], passed: tuple[str, ...]) -> None:
    from agentdescent_core.evaluation.child import child_argv
    from pytest_agentdescent.sandboxing import plugin_args

    assert plugin_args(args) == passed
    argv = child_argv(["tests/test_x.py"], state_dir=Path("/s"), pytest_args=passed)
    assert argv[-len(passed) - 1:] == [*passed, "tests/test_x.py"]


def test_a_child_told_no_xdist_gets_no_n_option() -> None:
    from agentdescent_core.evaluation.child import child_argv

    assert "-n" in child_argv(["t.py"], state_dir=Path("/s"))
    assert "-n" not in child_argv(["t.py"], state_dir=Path("/s"),
                                  pytest_args=("-p", "no:xdist"))


def test_the_p_options_of_pytest_addopts_come_first() -> None:
    from pytest_agentdescent.sandboxing import plugin_args

    environ = {"PYTEST_ADDOPTS": "-p no:hypothesispytest -q"}
    assert plugin_args(["-p", "no:anyio"], environ) == (
        "-p", "no:hypothesispytest", "-p", "no:anyio")
