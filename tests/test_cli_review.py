"""``agentdescent review --base REF --head REF`` on real repositories, as a status check runs it.

The agent repository of the session tests: marked tests fail with "missing
rule: WORD" until ``skills/support/rules.md`` has a line for WORD.  An honest
head adds the rules (passes); a head that also edits the tests fails naming
the test file before anything runs; a head that changes the skill without
fixing anything fails the acceptance test.  The user's checkout is
byte-for-byte the same afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import snapshot, user_git, write
from test_cli_check import agentdescent, explain
from test_session_runs import RULES, WORDS, make_agent_repo

pytestmark = pytest.mark.slow

BETTER = "# Support rules\n\n- greeting: say hi\n" + "".join(f"- {w}: answer it\n" for w in WORDS)


def branch(repo: Path, name: str, files: dict[str, str]) -> None:
    """A branch ``name`` off main with ``files`` changed, made without touching the checkout."""
    user_git(repo, "worktree", "add", "--quiet", "-b", name, str(repo.parent / name), "main")
    other = repo.parent / name
    for rel, text in files.items():
        write(other / rel, text)
    user_git(other, "add", "-A")
    user_git(other, "commit", "--quiet", "-m", name)
    user_git(repo, "worktree", "remove", "--force", str(other))


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    repo = tmp_path / "agent"
    make_agent_repo(repo, ini="evolve_paths = skills\nevolve_sandbox = local\n")
    branch(repo, "honest", {RULES: BETTER})
    branch(repo, "edits-tests", {RULES: BETTER,
                                 "tests/test_bot.py": "def test_answers():\n    pass\n"})
    branch(repo, "not-better", {"skills/support/style.md": "Be brief, and kind.\n"})
    write(repo / "notes.txt", "work in progress\n")  # the reviewer's own uncommitted work
    return repo


def test_an_honest_head_passes(agent: Path) -> None:
    before = snapshot(agent)

    result = agentdescent(agent, "review", "--base", "main", "--head", "honest")

    assert result.returncode == 0, explain(result)
    out = result.stdout
    assert "scope   ok: 1 changed file(s), all evolvable under skills" in out
    assert "tests/test_bot.py::test_answers[hello-0]" in out
    assert "fail->pass" in out
    assert "reward  0.000 -> 1.000; P(improvement) 1.00" in out
    assert "result  PASSED" in out
    assert snapshot(agent) == before
    assert user_git(agent, "status", "--porcelain") == "?? notes.txt"


def test_json_has_the_table_and_the_numbers(agent: Path) -> None:
    result = agentdescent(agent, "review", "--base", "main", "--head", "honest", "--json",
                          "--repeats", "1")

    assert result.returncode == 0, explain(result)
    data = json.loads(result.stdout)
    assert data["ok"] is True
    assert data["scope"] == {"ok": True, "artifact_changed": True, "changed": [RULES],
                             "violations": []}
    assert data["roots_source"] == "evolve_paths"
    evaluation = data["evaluation"]
    assert (evaluation["reward_before"], evaluation["reward_after"]) == (0.0, 1.0)
    assert evaluation["accepted"] is True
    assert evaluation["p_improvement"] > 0.95
    # The default betting test pairs runs: base and head get as many runs on the
    # busiest task, and a suite whose every test was fixed needs only a few.
    assert evaluation["repeats"]["base"] == evaluation["repeats"]["head"]
    assert 1 <= evaluation["repeats"]["head"] <= 3
    assert evaluation["sandbox"] == "local"
    kinds = {row["nodeid"]: row["kind"] for row in data["tasks"]}
    assert kinds["tests/test_bot.py::test_rules_keep_their_title"] == "guard"
    assert kinds["tests/test_bot.py::test_answers[hello-2]"] == "holdout"
    assert all(row["flip"] == "fail->pass" for row in data["tasks"] if row["kind"] != "guard")


def test_a_head_that_edits_tests_fails_naming_the_file(agent: Path) -> None:
    before = snapshot(agent)

    result = agentdescent(agent, "review", "--base", "main", "--head", "edits-tests")

    assert result.returncode == 1, explain(result)
    assert "modified  tests/test_bot.py" in result.stdout
    assert "FAILED: tests/test_bot.py (modified) may not change" in result.stderr
    assert "evaluating" not in result.stderr  # nothing ran
    assert snapshot(agent) == before


def test_a_head_that_is_not_better_fails(agent: Path) -> None:
    result = agentdescent(agent, "review", "--base", "main", "--head", "not-better", "--json")

    assert result.returncode == 1, explain(result)
    data = json.loads(result.stdout)
    assert data["scope"]["ok"] is True
    assert data["evaluation"]["accepted"] is False
    assert data["evaluation"]["reward_after"] == 0.0
    assert "FAILED: the improvement does not reproduce" in result.stderr


def test_a_ref_that_is_no_commit_is_a_usage_error(agent: Path) -> None:
    result = agentdescent(agent, "review", "--base", "main", "--head", "no-such-branch")

    assert result.returncode == 2, explain(result)
    assert "--head 'no-such-branch' is not a commit" in result.stderr


# ---------------------------------------------------------------- roots without paths

def ledger_branch(repo: Path, files: dict[str, str], roots: list[str]) -> str:
    """``agentdescent/dev`` off main with one ledger commit changing ``files``; its sha."""
    from agentdescent_core.artifacts.diff import Diff
    from agentdescent_core.artifacts.filetree import FileTree
    from agentdescent_core.ledger import Ledger

    with Ledger(repo, FileTree(roots)) as ledger:
        ledger.ensure_branches("main")
        return ledger.commit(Diff(files, rationale="Add the missing rules",
                                  author="worker-0")).sha


def test_without_paths_the_roots_come_from_the_branchs_own_commits(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, ini="evolve_sandbox = local\n")  # no evolve_paths anywhere
    sha = ledger_branch(repo, {RULES: BETTER}, ["skills"])
    assert "Agentdescent-Root: skills" in user_git(repo, "log", "-1", "--format=%B", sha)

    result = agentdescent(repo, "review", "--base", "main", "--head", "agentdescent/dev",
                          "--json", "--repeats", "1")

    assert result.returncode == 0, explain(result)
    data = json.loads(result.stdout)
    assert data["roots"] == ["skills"]
    assert data["roots_source"] == f"commit {sha}"
    assert data["scope"]["artifact_changed"] is True
    assert data["evaluation"]["accepted"] is True
    assert f"from the Agentdescent-Root trailers of commit {sha[:12]}" in result.stderr


def test_the_bases_evolve_paths_win_over_roots_a_head_claims(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, ini="evolve_paths = skills\nevolve_sandbox = local\n")
    main = user_git(repo, "rev-parse", "HEAD")
    # A head that dresses up as the tool and claims src/ as an artifact root.
    user_git(repo, "checkout", "--quiet", "-b", "claims-src")
    write(repo / "src/app.py", "print('changed')\n")
    user_git(repo, "commit", "--quiet", "-am",
             f"agentdescent: v1 edit the app\n\nedit\n\nAgentdescent-Version: 1\n"
             f"Agentdescent-Base: {main}\nAgentdescent-Root: src")
    user_git(repo, "checkout", "--quiet", "main")

    result = agentdescent(repo, "review", "--base", "main", "--head", "claims-src", "--json")

    assert result.returncode == 1, explain(result)
    data = json.loads(result.stdout)
    assert data["roots"] == ["skills"]
    assert data["roots_source"] == "evolve_paths"
    assert [v["path"] for v in data["scope"]["violations"]] == ["src/app.py"]
    assert data["evaluation"] is None


def test_no_paths_no_evolve_paths_no_ledger_commit_names_both_places(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, ini="evolve_sandbox = local\n")
    branch(repo, "human", {RULES: BETTER})

    result = agentdescent(repo, "review", "--base", "main", "--head", "human")

    assert result.returncode == 2, explain(result)
    assert "no artifact paths" in result.stderr
    assert "evolve_paths" in result.stderr
    assert "Agentdescent-Root trailers" in result.stderr
    assert "main..human" in result.stderr
