"""Read-based selection through real child runs: kept evidence, paired tasks, misses.

A repository with three skills; ``test_a`` reads ``skills/a`` in the test
process, ``test_b`` reads ``skills/b`` through a subprocess, ``test_c`` only
asks whether ``skills/c/flag`` exists (a ``stat``, which no tracer sees), so an
added flag is the selection miss the check before promotion must catch.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import user_git, write
from sandbox_support import ALL_BACKENDS, child_pytest_args, require_backend

from agentdescent_core.aggregator.checks import run_pairs
from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.evaluation.protocol import Selective, TaskSplit
from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
from agentdescent_core.governance import FrozenSet
from agentdescent_core.stats.policies import Sequential, policy_for

pytestmark = pytest.mark.slow

TESTS = '''\
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_a():
    assert "good" in (ROOT / "skills/a/SKILL.md").read_text()


def test_b():
    out = subprocess.run([sys.executable, "-c",
                          "print(open('skills/b/SKILL.md').read())"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "good" in out


def test_c():
    assert not os.path.exists(ROOT / "skills/c/flag")


def test_d():
    assert len(os.listdir(ROOT / "skills")) == 3


def test_e():
    if os.path.exists(ROOT / "skills/c/evil"):  # a stat: no tracer sees it
        (ROOT / "tests" / "test_skills.py").write_text("# gone\\n")
'''
A, B, C, D, E = (f"tests/test_skills.py::test_{name}" for name in "abcde")
BASE = {"skills/a/SKILL.md": "bad\n", "skills/b/SKILL.md": "good\n",
        "skills/c/SKILL.md": "c\n"}


@pytest.fixture
def backend() -> str:
    return "local"


@pytest.fixture
def verifier(tmp_path: Path, backend: str) -> Iterator[SandboxedVerifier]:
    repo = tmp_path / "repo"
    user_git(tmp_path, "init", "--quiet", "--initial-branch=main", "repo")
    write(repo / "pytest.ini", "[pytest]\ntestpaths = tests\n")
    for path, text in BASE.items():
        write(repo / path, text)
    write(repo / "tests/test_skills.py", TESTS)
    user_git(repo, "add", "-A")
    user_git(repo, "commit", "--quiet", "-m", "agent")
    tree = FileTree(["skills"])
    made = SandboxedVerifier(
        repo, user_git(repo, "rev-parse", "HEAD"), TaskSplit(train=(A, B, C, D, E)), tree=tree,
        frozen=FrozenSet(artifact_roots=tree.roots), backend=require_backend(backend),
        cache=None, test_timeout=30.0, run_timeout=120.0, pytest_args=child_pytest_args(),
        select="reads")
    yield made
    made.close()


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_a_candidate_reruns_only_the_tests_that_read_what_it_changes(
        verifier: SandboxedVerifier) -> None:
    assert isinstance(verifier, Selective)
    assert verifier.evaluate(BASE, [A, B, C, D], 1).rewards == {
        A: (0.0,), B: (1.0,), C: (1.0,), D: (1.0,)}
    assert verifier.records(BASE, A)[0].reads == ("skills/a/SKILL.md",)
    assert verifier.records(BASE, B)[0].reads == ("skills/b/SKILL.md",)
    assert verifier.records(BASE, D)[0].reads == ("skills/",)
    runs = verifier.evaluations
    fixed = {**BASE, "skills/a/SKILL.md": "good\n"}
    assert verifier.evaluate(fixed, [A, B, C, D], 1).rewards == {
        A: (1.0,), B: (1.0,), C: (1.0,), D: (1.0,)}
    assert verifier.evaluations - runs == 1  # only test_a ran; the others kept their evidence
    selection = verifier.select_tests(BASE, fixed, [A, B, C, D])
    assert selection.selected == (A,)
    assert selection.why == {A: "reads skills/a/SKILL.md"}
    grown = {**BASE, "skills/d/SKILL.md": "d\n"}  # a new skill: the listing of skills/ changes
    assert verifier.select_tests(BASE, grown, [A, B, C, D]).why == {D: "reads skills/"}
    assert verifier.evaluate(grown, [A, B, C, D], 1).rewards[D] == (0.0,)


def _betting() -> Sequential:
    policy = policy_for("betting", 2)
    assert isinstance(policy, Sequential)
    return policy


def test_the_acceptance_test_pairs_only_the_selected_tests(verifier: SandboxedVerifier) -> None:
    verifier.evaluate(BASE, [A, B, C, D], 1)
    fixed = {**BASE, "skills/a/SKILL.md": "good\n"}
    run = run_pairs(verifier, _betting(), BASE, fixed, [A, B, C, D])
    assert set(run.candidate.rewards) == {A}
    untouched = {**BASE, "skills/c/SKILL.md": "c, reworded\n"}  # test_c never opens it
    before = verifier.evaluations
    quiet = run_pairs(verifier, _betting(), BASE, untouched, [A, B, C, D])
    assert not quiet.decision.accept
    assert quiet.pairs == 0
    assert "no test read what it changes (skills/c/SKILL.md)" in quiet.decision.reason
    assert verifier.evaluations == before  # rejected without a single run


def test_a_kept_result_that_a_fresh_run_contradicts_is_a_miss(
        verifier: SandboxedVerifier) -> None:
    verifier.evaluate(BASE, [A, B, C, D], 1)
    flagged = {**BASE, "skills/c/flag": "1\n"}  # test_c only stats it: no read is recorded
    assert verifier.evaluate(flagged, [C], 1).rewards[C] == (1.0,)  # kept, and wrong
    assert verifier.confirm(flagged) == [C]
    assert verifier.selection.confirm_runs == 1  # counted apart from judging candidates
    assert verifier.evaluate(flagged, [C], 1).rewards[C] == (0.0,)  # the fresh run now
    assert verifier.selection.misses[0]["test"] == C
    assert verifier.select_tests(BASE, flagged, [A, B, C, D]).why[C] == "selection miss"
    assert verifier.confirm(flagged) == []  # nothing kept any more


def test_a_kept_result_whose_fresh_run_writes_a_frozen_file_rules_the_state_out(
        verifier: SandboxedVerifier) -> None:
    verifier.evaluate(BASE, [E], 1)
    evil = {**BASE, "skills/c/evil": "1\n"}
    assert verifier.evaluate(evil, [E], 1).rewards[E] == (1.0,)  # kept: nothing ran
    assert verifier.disqualification(evil) is None
    verifier.confirm(evil)
    refusal = verifier.disqualification(evil)
    assert refusal is not None
    assert refusal.category == "frozen-violation"
