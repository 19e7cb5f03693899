"""``agentdescent run``: runs ``python -m pytest --evolve`` and exits as it does."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from test_cli_check import SCRIPT, agentdescent, explain
from test_session_runs import RULES, make_agent_repo, user_visible


def test_a_dry_run_passes_options_and_pytest_arguments_through(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo)
    before = user_visible(repo)

    result = agentdescent(repo, "run", "skills", "--dry-run", "--rounds", "2", "--workers", "1",
                          "--sandbox", "local", "--", "-p", "no:cacheprovider",
                          "-p", "no:benchmark", "--evolve-seed", "3")

    assert result.returncode == 0, explain(result)
    assert "--evolve skills --evolve-rounds 2 --evolve-workers 1" in result.stderr
    assert "--evolve-dry-run -p no:cacheprovider -p no:benchmark --evolve-seed 3" in result.stderr
    assert "ledger: dry run on a scratch repository" in result.stdout
    assert "evolved diff (dry run)" in result.stdout
    assert f"+++ b/{RULES}" in result.stdout
    # a dry run changes no ref and no tracked file; only the state dir and its exclude line appear
    assert user_visible(repo) == before


def test_paths_default_to_the_ini(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, ini="evolve_paths = skills\n")

    result = agentdescent(repo, "run", "--dry-run", "--rounds", "1", "--sandbox", "local")

    assert result.returncode == 0, explain(result)
    assert "artifact: skills (2 files)" in result.stdout


def test_a_bad_pytest_option_exits_4_with_pytests_message(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo)

    result = agentdescent(repo, "run", "skills", "--", "--evolve-rounds", "many")

    assert result.returncode == 4, explain(result)
    assert "--evolve-rounds must be an integer >= 0, got 'many'" in result.stderr


def test_no_paths_anywhere_is_a_usage_error_not_a_test_run(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo)

    result = agentdescent(repo, "run", "--dry-run")

    assert result.returncode == 4, explain(result)
    assert "no artifact paths" in result.stderr
    assert "passed" not in result.stdout


def test_a_bad_option_of_the_command_exits_2(tmp_path: Path) -> None:
    result = agentdescent(tmp_path, "run", "skills", "--rounds", "-1")
    assert result.returncode == 2, explain(result)
    assert "--rounds" in result.stderr


def test_json_prints_this_runs_report_on_stdout_and_pytest_on_stderr(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo)

    result = agentdescent(repo, "run", "skills", "--dry-run", "--rounds", "1", "--workers", "1",
                          "--sandbox", "local", "--json", "--", "-p", "no:cacheprovider")

    assert result.returncode == 0, explain(result)
    payload = json.loads(result.stdout)  # nothing but the object on stdout
    assert payload["exit_code"] == 0
    assert payload["report"] == json.loads((repo / payload["report_path"]).read_text())
    assert payload["report"]["dry_run"] is True
    assert "ledger: dry run on a scratch repository" in result.stderr

    # a run that stops before its report does not pass the earlier report off as its own
    again = agentdescent(repo, "run", "skills", "--json", "--", "--evolve-rounds", "many")
    assert again.returncode == 4, explain(again)
    assert json.loads(again.stdout) == {"exit_code": 4, "report_path": None, "report": None}


def test_the_documented_completion_commands_print_completion_scripts(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text(encoding="utf-8")
    shells = set(re.findall(r"_AGENTDESCENT_COMPLETE=(\w+)_source agentdescent", doc))
    assert shells == {"bash", "zsh", "fish"}
    expected = {"bash": "complete -o nosort -F", "zsh": "#compdef agentdescent",
                "fish": "complete --no-files --command agentdescent"}
    for shell in shells:
        done = subprocess.run([SCRIPT], env=dict(os.environ,
                                                 _AGENTDESCENT_COMPLETE=f"{shell}_source"),
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert expected[shell] in done.stdout, (shell, done.stdout[:500])
