"""The offline example examples/skill-library, and the bench part measured on it.

The example is the ground truth of read-based test selection (issue 20): ten
skills, six tasks each, three calling the agent in-process and three running
it as a subprocess, every test reading only its own skill.  Here: its plain
suite fails half its tasks; its README's dry run evolves it to full reward in
a copy committed to a temporary git repository, leaving that repository's
refs alone (``tests/test_bench.py`` checks the bench part's keys).  Every
run works on a copy; the example's files are never edited.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import user_git

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "skill-library"
SKILLS = ("refunds", "shipping", "returns", "billing", "warranty", "privacy", "accounts",
          "gift-cards", "loyalty", "escalation")
IGNORED = shutil.ignore_patterns("__pycache__", ".pytest_cache", ".agentdescent")


def child_env() -> dict[str, str]:
    """This environment for a pytest started in the example (not as an evaluation child)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("AGENTDESCENT_CHILD", None)
    return env


def example_repo(tmp_path: Path) -> Path:
    """The example copied into a new git repository with one commit, as a user's clone."""
    repo = tmp_path / "skill-library"
    shutil.copytree(EXAMPLE, repo, ignore=IGNORED)
    user_git(tmp_path, "init", "--quiet", "--initial-branch=main", str(repo))
    user_git(repo, "add", "--all")
    user_git(repo, "commit", "--quiet", "-m", "the skill-library example")
    return repo


def calls_per_test(test_file: Path) -> dict[str, str]:
    """Test function name -> the agent function it calls (``answer`` or
    ``answer_in_subprocess``), for the tests marked ``evolve``."""
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(test_file.read_text("utf-8"))):
        if not isinstance(node, ast.FunctionDef):
            continue
        if not any(ast.unparse(d) == "pytest.mark.evolve" for d in node.decorator_list):
            continue
        called = {ast.unparse(c.func) for c in ast.walk(node) if isinstance(c, ast.Call)}
        found[node.name] = " ".join(sorted(called & {"answer", "answer_in_subprocess"}))
    return found


def test_each_skill_has_six_tasks_half_in_process_half_in_a_subprocess() -> None:
    assert sorted(p.parent.name for p in (EXAMPLE / "skills").glob("*/SKILL.md")) == sorted(SKILLS)
    for skill in SKILLS:
        test_file = EXAMPLE / "tests" / f"test_{skill.replace('-', '_')}.py"
        calls = calls_per_test(test_file)
        assert len(calls) == 6, test_file
        assert sorted(calls.values()) == ["answer"] * 3 + ["answer_in_subprocess"] * 3, calls
        assert f'SKILL = "{skill}"' in test_file.read_text("utf-8")  # its own skill only


@pytest.mark.slow
def test_plain_pytest_collects_sixty_tasks_and_half_fail(tmp_path: Path) -> None:
    work = tmp_path / "skill-library"
    shutil.copytree(EXAMPLE, work, ignore=IGNORED)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                          cwd=work, env=child_env(), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "30 failed, 30 passed" in done.stdout, done.stdout[-3000:]
    assert "evolve: 60 tasks, reward 0.500" in done.stdout, done.stdout[-3000:]
    # both ways of running the agent fail before evolving
    assert "test_refund_method" in done.stdout  # in-process
    assert "test_refund_partial" in done.stdout  # subprocess


@pytest.mark.slow
def test_evolve_dry_run_raises_the_reward_and_leaves_the_refs(tmp_path: Path) -> None:
    pytest.importorskip("pytest_agentdescent.session")
    repo = example_repo(tmp_path)
    refs_before = user_git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--evolve", "skills/", "--evolve-dry-run"],
        cwd=repo, env=child_env(), capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    report: dict[str, Any] = json.loads((repo / ".agentdescent" / "report.json").read_text())
    assert report["error"] is None
    assert report["reward_before"] == 0.5
    assert report["reward_after"] > report["reward_before"], done.stdout[-4000:]
    assert report["accepted"] >= 1
    assert len(report["tasks"]) == 60
    for verdict in (v for r in report["history"] for v in r["verdicts"]):
        # one skill per proposal: a candidate touches one skill, two when fused
        assert all(re.fullmatch(r"skills/[a-z-]+/SKILL\.md", p) for p in verdict["paths"])
        assert len(verdict["paths"]) <= len(verdict["workers"])
    # read-based selection (the default): each candidate re-ran exactly the tests of the
    # skills it touched, every one of them for what it read, and no kept result was wrong
    selection = report["selection"]
    assert selection["mode"] == "reads"
    assert selection["candidates"] >= 1
    assert selection["misses"] == []
    for entry in selection["per_candidate"]:
        skills = {path.split("/")[1] for path in entry["touched"]}
        reachable = {f"tests/test_{name.replace('-', '_')}.py" for name in skills}
        assert {nodeid.split("::")[0] for nodeid in entry["selected"]} == reachable, entry
        assert len(entry["selected"]) == 6 * len(skills), entry
        assert all(why.startswith("reads skills/") for why in entry["why"].values()), entry
    assert re.search(r"ran (6|12) of 60 tests \(reads\)", done.stdout), done.stdout[-4000:]
    # a dry run: no ref of the repository changed, its working tree is as it was
    assert user_git(repo, "for-each-ref", "--format=%(refname) %(objectname)") == refs_before
    assert user_git(repo, "status", "--porcelain") == ""
