"""SandboxedVerifier end to end: real repositories, real workspaces, real child pytest runs.

The agent repository's tests load the candidate's ``skills/calc/calc.py`` at
import time and behave according to flags the candidate sets in it (QUALITY,
SKIP, HANG, CRASH, WRITE), so each scenario is just a different artifact state.
Everything runs under the ``local`` backend; the hostile-candidate table
(tests/test_hostile_candidates.py) covers the isolating backends.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import snapshot, user_git, write
from sandbox_support import ALL_BACKENDS, child_pytest_args, require_backend

from agentdescent_core.artifacts.filetree import FileTree, state_hash
from agentdescent_core.evaluation.cache import EvalCache
from agentdescent_core.evaluation.child import split_plan
from agentdescent_core.evaluation.protocol import Disqualifying, TaskSplit, Verifier
from agentdescent_core.evaluation.sandboxed import SandboxedVerifier, UncommittedChangesWarning
from agentdescent_core.governance import FrozenSet

TEST_CALC = '''\
import importlib.util
import json
import os
import pathlib
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("calc", ROOT / "skills/calc/calc.py")
calc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(calc)


def test_add():
    assert calc.add(2, 3) == 5


def test_graded(evolve_reward):
    if getattr(calc, "FORGE", False):
        # what a hostile script could do: append "passed" lines to the recorder's journal
        journal = pathlib.Path(os.environ["HOME"]).parent / "records.jsonl"
        with journal.open("a") as out:
            for name in ("test_graded", "test_skip"):
                out.write(json.dumps({"nodeid": f"tests/test_calc.py::{name}", "repeat": 0,
                                      "outcome": "passed", "reward": 1.0, "mac": "0" * 64,
                                      "message": "", "output": "", "duration": 0.0,
                                      "phase": "call"}) + "\\n")
    evolve_reward(getattr(calc, "QUALITY", 0.0))


def test_skip():
    if getattr(calc, "SKIP", False):
        pytest.skip("the candidate made this skip")
    assert calc.add(1, 1) == 2


def test_hang():
    if getattr(calc, "HANG", False):
        time.sleep(120)


def test_crash():
    if getattr(calc, "CRASH", False):
        os._exit(3)


def test_env():
    assert "GITHUB_TOKEN" not in os.environ
    assert os.environ["AGENTDESCENT_CHILD"] == "1"
    assert "AGENTDESCENT_RECORD" not in os.environ
    assert "AGENTDESCENT_PLAN" not in os.environ
    assert os.environ["HOME"] != os.path.expanduser("~root")


def test_write():
    target = getattr(calc, "WRITE", None)
    if target:
        (ROOT / target).write_text("def test_add():\\n    assert True\\n")
    folder = getattr(calc, "MKDIR", None)
    if folder:
        (ROOT / folder).mkdir()
'''

TEST_MORE = '''\
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_more_add():
    spec = importlib.util.spec_from_file_location("calc", ROOT / "skills/calc/calc.py")
    calc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(calc)
    assert calc.add(10, 5) == 15
'''

CALC = "skills/calc/calc.py"
GOOD = "def add(a, b):\n    return a + b\n"
T = "tests/test_calc.py::"
ADD, GRADED, SKIP, HANG, CRASH, ENV, WRITE = (
    T + name for name in ("test_add", "test_graded", "test_skip", "test_hang", "test_crash",
                          "test_env", "test_write"))
MORE = "tests/test_more.py::test_more_add"
ALL = (ADD, GRADED, SKIP, HANG, CRASH, ENV, WRITE, MORE)


def state(extra: str = "", code: str = GOOD) -> dict[str, str]:
    return {CALC: code + extra, "skills/calc/SKILL.md": "# Calc\n\nAdd numbers.\n"}


@pytest.fixture(scope="module")
def agent_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    repo = tmp_path_factory.mktemp("agent") / "repo"
    user_git(repo.parent, "init", "--quiet", "--initial-branch=main", repo.name)
    write(repo / "pytest.ini", "[pytest]\ntestpaths = tests\n")
    for path, text in state().items():
        write(repo / path, text)
    write(repo / "tests/test_calc.py", TEST_CALC)
    write(repo / "tests/test_more.py", TEST_MORE)
    user_git(repo, "add", "-A")
    user_git(repo, "commit", "--quiet", "-m", "agent")
    return repo, user_git(repo, "rev-parse", "HEAD")


def make(agent_repo: tuple[Path, str], backend: str = "local", **kwargs: Any
         ) -> SandboxedVerifier:
    repo, commit = agent_repo
    tree = FileTree(["skills"])
    options: dict[str, Any] = {"cache": None, "test_timeout": 20.0, "run_timeout": 120.0,
                               "pytest_args": child_pytest_args()}
    options.update(kwargs)
    return SandboxedVerifier(repo, commit, TaskSplit(train=ALL), tree=tree,
                             frozen=FrozenSet(artifact_roots=tree.roots),
                             backend=require_backend(backend), **options)


@pytest.fixture
def verifier(agent_repo: tuple[Path, str]) -> Iterator[SandboxedVerifier]:
    made = make(agent_repo)
    yield made
    made.close()


def test_rewards_come_from_the_child_run(verifier: SandboxedVerifier,
                                         agent_repo: tuple[Path, str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_" + "x" * 36)
    before = snapshot(agent_repo[0])
    assert isinstance(verifier, Verifier)
    assert isinstance(verifier, Disqualifying)
    samples = verifier.evaluate(state("QUALITY = 0.3\nSKIP = True\n"),
                                [ADD, GRADED, SKIP, ENV, MORE], 1)
    # a skipped task earns 0.0: making a test skip is no improvement
    assert dict(samples.rewards) == {ADD: (1.0,), GRADED: (0.3,), SKIP: (0.0,), ENV: (1.0,),
                                     MORE: (1.0,)}
    skipped = verifier.records(state("QUALITY = 0.3\nSKIP = True\n"), SKIP)
    assert [(r.outcome, r.message) for r in skipped] == [
        ("skipped", "the candidate made this skip")]

    broken = state(code="def add(a, b):\n    return a - b\n")
    assert verifier.evaluate(broken, [ADD], 1).rewards[ADD] == (0.0,)
    [failure] = verifier.records(broken, ADD)
    assert failure.outcome == "failed"
    assert "assert -1 == 5" in failure.message
    assert verifier.candidate_error(broken) is None
    assert verifier.disqualification(broken) is None
    assert snapshot(agent_repo[0]) == before


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_every_backend_runs_the_child_and_its_recorder(agent_repo: tuple[Path, str],
                                                       backend: str) -> None:
    verifier = make(agent_repo, backend, network="default" if backend == "local" else "none",
                    test_timeout=3.0)
    try:
        candidate = state("QUALITY = 0.4\nHANG = True\n")
        samples = verifier.evaluate(candidate, [ADD, GRADED, HANG, ENV, MORE], 1)
        assert dict(samples.rewards) == {ADD: (1.0,), GRADED: (0.4,), HANG: (0.0,),
                                         ENV: (1.0,), MORE: (1.0,)}
        assert verifier.records(candidate, HANG)[0].phase == "timeout"
        broken = state(code="def add(a, b:\n    return a + b\n")
        verifier.evaluate(broken, [ADD], 1)
        assert "SyntaxError" in (verifier.candidate_error(broken) or "")
    finally:
        verifier.close()


def test_an_unchanged_candidate_is_never_run_twice(agent_repo: tuple[Path, str],
                                                   tmp_path: Path) -> None:
    cache_file = tmp_path / "eval.sqlite3"
    first = make(agent_repo, cache=EvalCache(cache_file))
    try:
        candidate = state("QUALITY = 0.5\n")
        one = first.evaluate(candidate, [ADD, GRADED], 1)
        assert first.evaluations == 2
        assert first.evaluate(candidate, [ADD, GRADED], 1) == one
        assert first.evaluations == 2
        # more repeats run only the missing ones
        three = first.evaluate(candidate, [ADD, GRADED], 3)
        assert first.evaluations == 6
        assert dict(three.rewards) == {ADD: (1.0,) * 3, GRADED: (0.5,) * 3}
    finally:
        first.close()
    # a new verifier (a new run) on the same cache file runs nothing at all
    second = make(agent_repo, cache=EvalCache(cache_file))
    try:
        assert second.evaluate(candidate, [ADD, GRADED], 3) == three
        assert second.evaluations == 0
        assert [r.repeat for r in second.records(candidate, GRADED)] == [0, 1, 2]
    finally:
        second.close()
    # a setting that can change results (here the per-test timeout) is another cache context
    third = make(agent_repo, cache=EvalCache(cache_file), test_timeout=30.0)
    try:
        third.evaluate(candidate, [ADD], 1)
        assert third.evaluations == 1
    finally:
        third.close()


def test_concurrent_requests_for_one_candidate_share_the_run(
        verifier: SandboxedVerifier) -> None:
    candidate = state("QUALITY = 0.7\n")
    results: list[Any] = []

    def ask() -> None:
        results.append(verifier.evaluate(candidate, [ADD, GRADED], 2))

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 3
    assert all(r == results[0] for r in results)
    assert verifier.evaluations == 4


def test_a_collection_error_fails_the_whole_candidate(verifier: SandboxedVerifier) -> None:
    broken = state(code="def add(a, b:\n    return a + b\n")
    samples = verifier.evaluate(broken, [ADD, GRADED, MORE], 1)
    assert set(samples.rewards.values()) == {(0.0,)}
    error = verifier.candidate_error(broken)
    assert error is not None
    assert "SyntaxError" in error
    assert "tests/test_calc.py" in error
    assert verifier.disqualification(broken) is None
    # the verdict is kept: asking again runs nothing
    runs = verifier.usage()["children"]
    verifier.evaluate(broken, [ADD, SKIP], 2)
    assert verifier.usage()["children"] == runs
    assert verifier.evaluate(state(), [ADD], 1).rewards[ADD] == (1.0,)


def test_a_frozen_file_change_disqualifies_and_is_restored(
        verifier: SandboxedVerifier) -> None:
    cheat = state("WRITE = 'tests/test_calc.py'\n", code="def add(a, b):\n    return 0\n")
    samples = verifier.evaluate(cheat, [WRITE, ADD], 1)
    refusal = verifier.disqualification(cheat)
    assert refusal is not None
    assert refusal.category == "frozen-violation"
    assert "tests/test_calc.py" in refusal.message
    assert samples.reward() == 0.0
    # the rewritten test is gone: the honest candidate is judged by the committed test
    honest = state(code="def add(a, b):\n    return 0\n")
    assert verifier.evaluate(honest, [ADD], 1).rewards[ADD] == (0.0,)
    assert verifier.disqualification(honest) is None


def test_forged_journal_lines_are_ignored(verifier: SandboxedVerifier) -> None:
    forger = state("FORGE = True\nSKIP = True\nQUALITY = 0.1\n")
    samples = verifier.evaluate(forger, [GRADED, SKIP], 1)
    assert dict(samples.rewards) == {GRADED: (0.1,), SKIP: (0.0,)}
    assert [r.outcome for r in verifier.records(forger, SKIP)] == ["skipped"]


def test_an_added_empty_directory_is_not_a_violation(verifier: SandboxedVerifier) -> None:
    # what plugins such as pytest-benchmark do in every run (.benchmarks/ in the rootdir)
    candidate = state("MKDIR = '.tool-state'\n")
    assert verifier.evaluate(candidate, [WRITE, ADD], 1).rewards == {WRITE: (1.0,), ADD: (1.0,)}
    assert verifier.disqualification(candidate) is None
    again = state("MKDIR = '.tool-state'\n# again\n")  # the reset removed it: mkdir works again
    assert verifier.evaluate(again, [WRITE], 1).rewards == {WRITE: (1.0,)}


def test_timeouts_and_crashes_fail_their_test_and_the_run_goes_on(
        agent_repo: tuple[Path, str]) -> None:
    verifier = make(agent_repo, test_timeout=2.0)
    try:
        candidate = state("HANG = True\nCRASH = True\nQUALITY = 1\n")
        samples = verifier.evaluate(candidate, [ADD, HANG, CRASH, ENV, GRADED], 2)
        assert dict(samples.rewards) == {ADD: (1.0, 1.0), HANG: (0.0, 0.0), CRASH: (0.0, 0.0),
                                         ENV: (1.0, 1.0), GRADED: (1.0, 1.0)}
        hung = verifier.records(candidate, HANG)
        assert [r.phase for r in hung] == ["timeout", "timeout"]
        assert "timed out after 2s" in hung[0].message
        crashed = verifier.records(candidate, CRASH)
        assert [r.phase for r in crashed] == ["crash", "crash"]
        assert "exit code 3" in crashed[0].message
        assert verifier.usage()["children"] >= 5  # a fresh child after every cut
    finally:
        verifier.close()


def test_the_whole_run_timeout_bounds_a_hung_child(agent_repo: tuple[Path, str],
                                                   tmp_path: Path) -> None:
    cache_file = tmp_path / "eval.sqlite3"
    verifier = make(agent_repo, test_timeout=None, run_timeout=5.0, cache=EvalCache(cache_file))
    try:
        candidate = state("HANG = True\n")
        samples = verifier.evaluate(candidate, [ADD, HANG, ENV], 1)
        assert dict(samples.rewards) == {ADD: (1.0,), HANG: (0.0,), ENV: (0.0,)}
        [hung] = verifier.records(candidate, HANG)
        assert hung.phase == "timeout"
        assert "whole-run timeout (5s)" in hung.message
        [never] = verifier.records(candidate, ENV)
        assert never.message.startswith("not run")
    finally:
        verifier.close()
    # a test that never ran is not a measurement: it is not cached
    cache = EvalCache(cache_file)
    try:
        context = verifier.cache_context
        assert context is not None
        key = state_hash(candidate)
        assert cache.get(key, context, ENV, 0) is None
        assert cache.get(key, context, ADD, 0) is not None
    finally:
        cache.close()


def test_eval_concurrency_runs_chunks_in_separate_workspaces(
        agent_repo: tuple[Path, str]) -> None:
    verifier = make(agent_repo, eval_concurrency=2)
    try:
        samples = verifier.evaluate(state("QUALITY = 0.25\n"), [ADD, GRADED, MORE], 1)
        assert dict(samples.rewards) == {ADD: (1.0,), GRADED: (0.25,), MORE: (1.0,)}
        assert verifier.usage()["workspaces"] == 2
        assert verifier.usage()["children"] == 2
    finally:
        verifier.close()


def test_requests_are_checked(verifier: SandboxedVerifier) -> None:
    with pytest.raises(ValueError, match="unknown task id"):
        verifier.evaluate(state(), ["tests/test_calc.py::test_nope"], 1)
    with pytest.raises(ValueError, match="repeats"):
        verifier.evaluate(state(), [ADD], 0)
    with pytest.raises(ValueError, match="eval_concurrency"):
        make((Path("."), "HEAD"), eval_concurrency=0)


def test_split_plan_balances_and_keeps_files_together() -> None:
    plan = {"a.py::x": (0, 3), "a.py::y": (0, 3), "b.py::z": (0, 2), "c.py::w": (0, 1)}
    parts = split_plan(plan, 2)
    assert len(parts) == 2
    assert sorted(sorted(p) for p in parts) == [["a.py::x", "a.py::y"], ["b.py::z", "c.py::w"]]
    # fewer files than chunks: split by test
    single = split_plan({"a.py::x": (0, 1), "a.py::y": (0, 1)}, 4)
    assert sorted(sorted(p) for p in single) == [["a.py::x"], ["a.py::y"]]
    assert split_plan(plan, 1) == [plan]
    with pytest.raises(ValueError, match="chunks"):
        split_plan(plan, 0)


def test_uncommitted_edits_of_tests_or_artifacts_are_warned_about_once(
    agent_repo: tuple[Path, str],
) -> None:
    repo, _commit = agent_repo
    skill = repo / "skills/calc/SKILL.md"
    original = skill.read_text()
    skill.write_text(original + "An edit not committed yet.\n")
    (repo / "notes.txt").write_text("untracked, not Python, not config: not worth a warning\n")
    try:
        with pytest.warns(UncommittedChangesWarning, match="skills/calc/SKILL.md") as seen:
            made = make(agent_repo)
        made.close()
        assert len(seen) == 1
        assert "notes.txt" not in str(seen[0].message)
        assert "artifact files skills/calc/SKILL.md" in str(seen[0].message)
    finally:
        skill.write_text(original)
        (repo / "notes.txt").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncommittedChangesWarning)
        make(agent_repo).close()


@pytest.mark.parametrize("edit", ["conftest.py", "pytest.ini", "helpers/fixtures.py"])
def test_uncommitted_frozen_files_are_warned_about_like_test_modules(
    agent_repo: tuple[Path, str], edit: str,
) -> None:
    """A fixture or ini edit that plain pytest would see, and the sandbox would not."""
    repo, _commit = agent_repo
    path = repo / edit
    existed = path.exists()
    original = path.read_text() if existed else None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((original or "") + "\n# edited, not committed\n")
    try:
        with pytest.warns(UncommittedChangesWarning) as seen:
            make(agent_repo).close()
        text = str(seen[0].message)
        assert f"frozen files {edit}" in text
        assert "differ from a plain pytest run" in text
    finally:
        if original is None:
            path.unlink()
        else:
            path.write_text(original)


def test_an_xdist_n_in_the_users_addopts_does_not_split_the_child(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    repo = tmp_path / "repo"
    user_git(tmp_path, "init", "--quiet", "--initial-branch=main", repo.name)
    write(repo / "pytest.ini", "[pytest]\naddopts = -n 2\ntestpaths = tests\n")
    write(repo / "skills/calc/SKILL.md", "# Calc\n\nAdd numbers.\n")
    write(repo / "tests/test_skill.py",
          "from pathlib import Path\n\n"
          "def test_says_add():\n"
          "    text = (Path(__file__).parents[1] / 'skills/calc/SKILL.md').read_text()\n"
          "    assert 'Add' in text\n")
    user_git(repo, "add", "-A")
    user_git(repo, "commit", "--quiet", "-m", "repo")
    commit = user_git(repo, "rev-parse", "HEAD")
    tree = FileTree(["skills"])
    task = "tests/test_skill.py::test_says_add"
    verifier = SandboxedVerifier(repo, commit, TaskSplit(train=(task,)), tree=tree,
                                 frozen=FrozenSet(artifact_roots=tree.roots),
                                 backend=require_backend("local"), cache=None,
                                 test_timeout=30.0, run_timeout=120.0,
                                 pytest_args=child_pytest_args())
    try:
        good = {"skills/calc/SKILL.md": "# Calc\n\nAdd numbers.\n"}
        bad = {"skills/calc/SKILL.md": "# Calc\n\nSubtract numbers.\n"}
        assert verifier.evaluate(good, [task], 2).rewards[task] == (1.0, 1.0)
        assert verifier.evaluate(bad, [task], 1).rewards[task] == (0.0,)
        assert verifier.records(bad, task)[0].outcome == "failed"
    finally:
        verifier.close()
