"""``agentdescent check`` as the pre-commit hook runs it: the real console script, real repos.

Each bad case is a small change to a good agent repository (the one the
session tests evolve); the check must fail with exit 1 and a stderr line that
names the thing at fault, and the good repository must pass with exit 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import snapshot, user_git, write
from test_session_runs import make_agent_repo

from agentdescent_core.evaluation.journal import CHILD_ENV

SCRIPT = str(Path(sys.executable).with_name("agentdescent"))


def agentdescent(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed console script, run the way a user (or pre-commit) would."""
    env = {k: v for k, v in os.environ.items() if k != CHILD_ENV}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run([SCRIPT, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def explain(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def test_a_good_repository_passes_and_nothing_changes(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, ini="evolve_paths = skills\n")
    before = snapshot(repo)

    result = agentdescent(repo, "check")

    assert result.returncode == 0, explain(result)
    assert result.stdout.strip() == ("ok: artifact skills (2 evolvable files); 9 tasks "
                                     "(6 train, 3 holdout); 1 guard")
    assert "problem" not in result.stderr
    assert snapshot(repo) == before  # no cache dir, no bytecode, no state dir


def test_counts_of_one_are_singular(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    user_git(tmp_path, "init", "--quiet", "--initial-branch=main", str(repo))
    write(repo / "skills/one.md", "Say hi.\n")
    write(repo / "tests/test_one.py", "import pytest\n\n\n@pytest.mark.evolve\n"
                                      "def test_one():\n    assert True\n")
    write(repo / "pytest.ini", "[pytest]\nevolve_paths = skills\n")
    write(repo / "conftest.py", "def pytest_evolve_propose(context):\n    return None\n")
    user_git(repo, "add", "-A")
    user_git(repo, "commit", "--quiet", "-m", "one of each")

    result = agentdescent(repo, "check")

    assert result.returncode == 0, explain(result)
    assert result.stdout.strip() == ("ok: artifact skills (1 evolvable file); 1 task "
                                     "(1 train, 0 holdout); 0 guards")


def test_json_output_describes_the_plan(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo)

    result = agentdescent(repo, "check", "skills", "--json")

    assert result.returncode == 0, explain(result)
    data = json.loads(result.stdout)
    assert data["ok"] is True
    assert data["roots"] == ["skills"]
    assert data["evolvable"] == ["skills/support/rules.md", "skills/support/style.md"]
    assert (data["tasks"], data["train"], data["holdout"]) == (9, 6, 3)
    assert data["guards"] == ["tests/test_bot.py::test_rules_keep_their_title"]


def _no_paths(repo: Path) -> list[str]:
    return []


def _missing_root(repo: Path) -> list[str]:
    return ["skils"]


def _test_module_inside(repo: Path) -> list[str]:
    write(repo / "skills/support/test_rules.py", "def test_rules():\n    assert True\n")
    return ["skills"]


def _conftest_inside(repo: Path) -> list[str]:
    write(repo / "skills/conftest.py", "import pytest\n")
    return ["skills"]


def _nothing_marked(repo: Path) -> list[str]:
    text = (repo / "tests/test_bot.py").read_text()
    text = text.replace("marks=pytest.mark.evolve(holdout=case == 2)", "marks=()")
    write(repo / "tests/test_bot.py", text)
    return ["skills"]


def _all_frozen(repo: Path) -> list[str]:
    write(repo / "pytest.ini", "[pytest]\nevolve_frozen = skills/**\n")
    return ["skills"]


def _does_not_collect(repo: Path) -> list[str]:
    write(repo / "tests/test_broken.py", "import no_such_module_here\n")
    return ["skills"]


def _bad_ini_value(repo: Path) -> list[str]:
    write(repo / "pytest.ini", "[pytest]\nevolve_repeats = many\n")
    return ["skills"]


def _symlink_in_artifact(repo: Path) -> list[str]:
    (repo / "skills/support/link.md").symlink_to("rules.md")
    return ["skills"]


@pytest.mark.parametrize(("make_bad", "named", "says"), [
    (_no_paths, "evolve_paths", "no artifact paths"),
    (_missing_root, "configuration", "skils does not exist"),
    (_test_module_inside, "skills/support/test_rules.py", "move it out of skills"),
    (_conftest_inside, "skills/conftest.py", "move it out of skills"),
    (_nothing_marked, "tasks", "no test is marked @pytest.mark.evolve"),
    (_all_frozen, "frozen set", "every file under the artifact roots is frozen"),
    (_does_not_collect, "tests/test_broken.py", "No module named 'no_such_module_here'"),
    (_bad_ini_value, "configuration", "ini evolve_repeats"),
    (_symlink_in_artifact, "skills/support/link.md", "is a symbolic link"),
], ids=lambda value: getattr(value, "__name__", None))
def test_each_problem_fails_naming_the_thing(tmp_path: Path, make_bad: Callable[[Path], list[str]],
                                             named: str, says: str) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo)
    paths = make_bad(repo)

    result = agentdescent(repo, "check", *paths)

    assert result.returncode == 1, explain(result)
    lines = [line for line in result.stderr.splitlines() if line.startswith("agentdescent check: ")]
    problem = [line for line in lines if line.startswith(f"agentdescent check: {named}: ")]
    assert problem, explain(result)
    assert says in problem[0], explain(result)
    assert lines[-1].endswith("found")
    assert result.stdout == ""


def test_pytest_arguments_after_the_separator_reach_the_collection(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo)
    write(repo / "ci.ini", "[pytest]\nevolve_paths = skills/support\n")
    user_git(repo, "add", "ci.ini")
    user_git(repo, "commit", "--quiet", "-m", "ci ini")

    result = agentdescent(repo, "check", "--json", "--", "-c", "ci.ini", "-k", "hello")

    assert result.returncode == 0, explain(result)
    data = json.loads(result.stdout)
    assert data["roots"] == ["skills/support"]
    assert data["tasks"] == 3  # -k hello selected the hello cases only


def test_a_frozen_pattern_that_matches_nothing_is_a_warning(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, ini="evolve_paths = skills\nevolve_frozen = skills/*/LICENSE\n")

    result = agentdescent(repo, "check")

    assert result.returncode == 0, explain(result)
    assert ("agentdescent check: warning: frozen pattern 'skills/*/LICENSE' matches no file "
            "under the artifact roots") in result.stderr


def test_usage_error_of_the_command_exits_2(tmp_path: Path) -> None:
    result = agentdescent(tmp_path, "check", "--no-such-option")
    assert result.returncode == 2, explain(result)


def test_no_proposer_fails_as_the_run_would_refuse(tmp_path: Path) -> None:
    from test_session_runs import evolve

    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer="", ini="evolve_paths = skills\n")

    checked = agentdescent(repo, "check")
    run = evolve(repo)

    assert checked.returncode == 1, explain(checked)
    assert run.returncode == 4, explain(run)
    refusal = next(line for line in run.stderr.splitlines() if "has no proposer" in line)
    said = refusal.removeprefix("ERROR: ").strip()
    problem = [line for line in checked.stderr.splitlines()
               if line.startswith("agentdescent check: proposer: ")]
    assert problem, explain(checked)
    assert said in problem[0], explain(checked)
    assert checked.stdout == ""


@pytest.mark.parametrize("args", [("--evolve-rounds", "0"),
                                  ("--evolve-model", "anthropic:claude-haiku-4-5")],
                         ids=["baseline-only", "model"])
def test_no_hook_is_fine_with_a_model_or_no_rounds(tmp_path: Path, args: tuple[str, ...]) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer="", ini="evolve_paths = skills\n")

    result = agentdescent(repo, "check", "--", *args)

    assert result.returncode == 0, explain(result)
    assert "proposer" not in result.stderr
    assert result.stdout.startswith("ok: artifact skills")


def test_checking_the_tests_says_they_are_frozen_by_default(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo)

    result = agentdescent(repo, "check", "tests")

    assert result.returncode == 1, explain(result)
    lines = [line for line in result.stderr.splitlines() if line.startswith("agentdescent check: ")]
    assert lines[0].startswith("agentdescent check: tests: holds only test code, which is "
                               "frozen by default"), explain(result)
    assert "`agentdescent check skills/`" in lines[0]
    assert not any("narrow" in line or "move it out" in line for line in lines), explain(result)
    assert lines[-1] == "agentdescent check: 1 problem found"


def test_a_configured_frozen_pattern_is_named_when_it_froze_everything(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, ini="evolve_paths = skills\nevolve_frozen = skills/**\n")

    result = agentdescent(repo, "check")

    assert result.returncode == 1, explain(result)
    problem = [line for line in result.stderr.splitlines()
               if line.startswith("agentdescent check: frozen set: ")]
    assert problem, explain(result)
    assert "narrow the configured evolve_frozen / --evolve-frozen globs ('skills/**')" in problem[0]
    assert "frozen by default" not in problem[0]
