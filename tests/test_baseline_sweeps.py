"""Repeats are sweeps: no test runs twice in one child process.

A test that cannot run twice in a process — a generator given to
``parametrize`` is used up by its first run, a module-level list the test
appends to — must score under ``pytest --evolve`` what a plain ``pytest`` run
gives it, on every repeat of the baseline.  And a test whose first run and
later runs disagree every time (it depends on what an earlier run left behind)
is named in a warning, while a merely flaky test is not.

Every test here builds a fresh git repository and runs the real plugin in a
subprocess, as a user would (helpers from ``test_session_runs``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import user_git, write
from sandbox_support import ALL_BACKENDS, child_pytest_args, require_backend
from test_session_runs import evolve, explain, plain_reward, report_of

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.evaluation.child import ChildConfig, run_tests, sweeps
from agentdescent_core.evaluation.protocol import TaskSplit
from agentdescent_core.evaluation.records import TestRecord, first_run_stands_apart
from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
from agentdescent_core.governance import FrozenSet
from agentdescent_core.sandbox.select import get_backend

#: One xdist worker (``--dist loadgroup``): the module fixtures are built once, not per worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("baseline-sweeps")]

#: Tasks that pass once per process and fail on a second run in the same one.
ONCE_PER_PROCESS = '''\
import pytest

SEEN = []


@pytest.mark.evolve
@pytest.mark.parametrize("items", [["a", "b", "c"], ("a", "b", "c"), (c for c in "abc")])
def test_joined(items):
    assert ", ".join(items) == "a, b, c"


@pytest.mark.evolve
def test_module_state():
    SEEN.append("run")
    assert SEEN == ["run"], f"ran {len(SEEN)} times in this process"
'''

#: Tasks whose outcome depends on files they leave outside the workspace (in
#: OUTSIDE, which the workspace reset between sweeps never touches; writable
#: under ``local``): the first run in a fresh world is different.
ORDER_DEPENDENT = '''\
import os
from pathlib import Path

import pytest

OUTSIDE = Path(OUTSIDE_HERE)


def _seen(name):
    marker = OUTSIDE / name
    seen = marker.exists()
    marker.write_text("ran")
    return seen


@pytest.mark.evolve
def test_fails_on_first_run():
    assert _seen("first-fails"), "nothing from an earlier run"


@pytest.mark.evolve
def test_passes_on_first_run_only():
    assert not _seen("first-passes"), "an earlier run left its mark"


@pytest.mark.evolve
def test_flaky():
    assert os.urandom(1)[0] % 2, "lost the coin toss"


@pytest.mark.evolve
def test_alternates():
    counter = OUTSIDE / "alternates"
    runs = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(runs + 1))
    assert runs % 2 == 0, f"run {runs} is odd"


@pytest.mark.evolve
def test_steady():
    pass
'''

PROPOSE_NOTHING = "def pytest_evolve_propose(context):\n    return None\n"


def make_repo(path: Path, tests: str) -> Path:
    """A committed repository: one skill file, ``tests``, a hook that proposes nothing."""
    path.mkdir(parents=True)
    user_git(path, "init", "--quiet", "--initial-branch=main")
    write(path / "skills/s/SKILL.md", "# A skill\n")
    write(path / "tests/test_tasks.py", tests)
    write(path / "conftest.py", PROPOSE_NOTHING)
    write(path / "pytest.ini", "[pytest]\n")
    user_git(path, "add", "-A")
    user_git(path, "commit", "--quiet", "-m", "the agent")
    return path


def baseline(repo: Path, sandbox: str, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                             dict[str, Any]]:
    result = evolve(repo, "--evolve-rounds", "0", "--evolve-dry-run",
                    "--evolve-sandbox", sandbox, "--evolve-workers", "1", *args)
    assert result.returncode == 0, explain(result)
    return result, report_of(repo)


def before_of(report: dict[str, Any]) -> dict[str, float]:
    return {task["nodeid"].split("::", 1)[1]: task["before"] for task in report["tasks"]}


# ---------------------------------------------------------------- one run per process


@pytest.fixture(scope="module", params=ALL_BACKENDS)
def once_per_process(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                     ) -> tuple[str, subprocess.CompletedProcess[str], dict[str, Any], Path]:
    """The baseline of ONCE_PER_PROCESS under one backend, at 12 repeats."""
    name = str(request.param)
    require_backend(name)
    repo = make_repo(tmp_path_factory.mktemp(f"once-{name}") / "agent", ONCE_PER_PROCESS)
    result, report = baseline(repo, name, "-o", "evolve_baseline_repeats=12")
    return name, result, report, repo


def test_a_generator_in_parametrize_scores_as_plain_pytest(
        once_per_process: tuple[str, subprocess.CompletedProcess[str], dict[str, Any], Path],
) -> None:
    _name, result, report, repo = once_per_process
    before = before_of(report)
    # run twice in one process, the generator case earned 1/12: 1.0 on repeat 0 only
    assert before["test_joined[<genexpr>]"] == 1.0, explain(result)
    assert before["test_joined[items0]"] == before["test_joined[items1]"] == 1.0
    tasks, reward = plain_reward(repo)
    assert (tasks, reward) == (4, 1.0)
    assert report["reward_before"] == pytest.approx(reward)
    assert "baseline  reward 1.000" in result.stdout, explain(result)
    # every (test, repeat) ran: 4 tasks x 12 repeats, each repeat its own child
    assert report["test_runs"] == 4 * 12


def test_a_test_that_mutates_module_state_scores_as_plain_pytest(
        once_per_process: tuple[str, subprocess.CompletedProcess[str], dict[str, Any], Path],
) -> None:
    _name, result, report, _repo = once_per_process
    assert before_of(report)["test_module_state"] == 1.0, explain(result)
    # and nothing about it looks order-dependent: each run is a first run
    assert not [w for w in report["warnings"] if "test_module_state" in w]


# ---------------------------------------------------------------- the disagreement warning


@pytest.fixture(scope="module")
def order_dependent(tmp_path_factory: pytest.TempPathFactory
                    ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The baseline of ORDER_DEPENDENT under local, at 24 repeats.

    Only ``local`` lets a test write outside its workspace; under bwrap and
    docker the same test fails on every run (nothing to warn about).
    """
    outside = tmp_path_factory.mktemp("outside")
    repo = make_repo(tmp_path_factory.mktemp("order") / "agent",
                     ORDER_DEPENDENT.replace("OUTSIDE_HERE", repr(str(outside))))
    return baseline(repo, "local", "-o", "evolve_baseline_repeats=24")


def _warnings_naming(report: dict[str, Any], test: str) -> list[str]:
    return [w for w in report["warnings"] if f"::{test}:" in w]


def test_a_test_that_fails_only_on_its_first_run_is_named(
        order_dependent: tuple[subprocess.CompletedProcess[str], dict[str, Any]]) -> None:
    result, report = order_dependent
    [warning] = _warnings_naming(report, "test_fails_on_first_run")
    assert "its first run failed (reward 0) but all 23 later runs passed" in warning
    assert "depends on state an earlier run left behind" in warning
    assert "Make it independent of earlier runs" in warning
    # in the terminal summary, under the run's other warnings
    summary = result.stdout.split("agentdescent warnings", 1)
    assert len(summary) == 2, explain(result)
    assert "tests/test_tasks.py::test_fails_on_first_run: its first run failed" in summary[1]
    assert before_of(report)["test_fails_on_first_run"] == pytest.approx(23 / 24)


def test_a_test_that_passes_only_on_its_first_run_is_named(
        order_dependent: tuple[subprocess.CompletedProcess[str], dict[str, Any]]) -> None:
    _result, report = order_dependent
    [warning] = _warnings_naming(report, "test_passes_on_first_run_only")
    assert "its first run passed but all 23 later runs failed (reward 0)" in warning
    assert before_of(report)["test_passes_on_first_run_only"] == pytest.approx(1 / 24)


def test_flaky_and_steady_tests_are_not_named(
        order_dependent: tuple[subprocess.CompletedProcess[str], dict[str, Any]]) -> None:
    result, report = order_dependent
    # a coin toss shows "first differs from 23 agreeing others" with probability 2**-22
    assert _warnings_naming(report, "test_flaky") == [], explain(result)
    assert _warnings_naming(report, "test_alternates") == []
    assert _warnings_naming(report, "test_steady") == []
    assert before_of(report)["test_alternates"] == pytest.approx(0.5)


@pytest.mark.parametrize(("outcomes", "named"), [
    ("FPP", True), ("PFFF", True), ("PFF", True),
    ("PF", False),  # one later run proves nothing
    ("PPP", False), ("FFF", False), ("PFP", False), ("FPFP", False), ("PPF", False),
    ("PSS", True),  # ran once, then skipped on every later run
])
def test_the_rule_needs_every_later_run_to_agree(outcomes: str, named: bool) -> None:
    kinds = {"P": ("passed", 1.0), "F": ("failed", 0.0), "S": ("skipped", None)}
    runs = [TestRecord("t.py::x", kinds[c][0], kinds[c][1], repeat=i)
            for i, c in enumerate(outcomes)]
    assert first_run_stands_apart(runs) is named
    # a run cut short (the whole-run timeout) is not an outcome to compare
    cut = [*runs[:-1], TestRecord("t.py::x", "failed", 0.0, repeat=len(runs) - 1,
                                  phase="timeout")]
    assert first_run_stands_apart(cut) is False


# ---------------------------------------------------------------- the child's contract


def test_a_plan_with_two_runs_of_a_test_is_refused(tmp_path: Path) -> None:
    config = ChildConfig(backend=get_backend("local"))
    with pytest.raises(ValueError, match=r"2 runs of 'tests/test_a.py::test_x'.*sweeps\(\)"):
        run_tests(tmp_path, {"tests/test_a.py::test_x": (0, 2)}, config,
                  scratch=tmp_path / "scratch", state_dir=tmp_path / "state")
    assert not (tmp_path / "scratch").exists()  # refused before any child started


def test_sweeps_hold_each_test_once_per_repeat() -> None:
    keys = [("b.py::y", 1), ("a.py::x", 0), ("a.py::x", 2), ("b.py::y", 0), ("a.py::x", 1)]
    assert sweeps(keys) == [
        {"a.py::x": (0, 1), "b.py::y": (0, 1)},
        {"a.py::x": (1, 1), "b.py::y": (1, 1)},
        {"a.py::x": (2, 1)},
    ]


HANGS = '''\
import time

import pytest


@pytest.mark.evolve
def test_quick():
    pass


@pytest.mark.evolve
def test_hangs():
    time.sleep(120)
'''


def local_verifier(repo: Path, tasks: tuple[str, ...], **options: Any) -> SandboxedVerifier:
    tree = FileTree(["skills"])
    return SandboxedVerifier(
        repo, user_git(repo, "rev-parse", "HEAD"), TaskSplit(train=tasks),
        tree=tree, frozen=FrozenSet(artifact_roots=tree.roots), backend=get_backend("local"),
        cache=None, **({"pytest_args": child_pytest_args()} | options))


def test_the_whole_run_timeout_bounds_all_sweeps_together(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "agent", HANGS)
    quick, hangs = "tests/test_tasks.py::test_quick", "tests/test_tasks.py::test_hangs"
    verifier = local_verifier(repo, (quick, hangs), test_timeout=None, run_timeout=6.0)
    try:
        state = {"skills/s/SKILL.md": "# A skill\n"}
        samples = verifier.evaluate(state, [quick, hangs], 3)
        assert dict(samples.rewards) == {quick: (1.0, 0.0, 0.0), hangs: (0.0, 0.0, 0.0)}
        first, *later = verifier.records(state, hangs)
        assert "ran out while this test ran" in first.message
        # the deadline was spent in sweep 0: sweeps 1 and 2 never started a child
        assert [r.message.split(":")[0] for r in later] == ["not run", "not run"]
        assert verifier.usage()["children"] == 1
    finally:
        verifier.close()


BREAKS_ON_A_WORD = '''\
from pathlib import Path

import pytest

if "BROKEN" in (Path(__file__).resolve().parents[1] / "skills/s/SKILL.md").read_text():
    raise RuntimeError("the skill says BROKEN")


@pytest.mark.evolve
def test_quick():
    pass
'''


def test_a_candidate_that_fails_as_a_whole_costs_one_sweep(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "agent", BREAKS_ON_A_WORD)
    quick = "tests/test_tasks.py::test_quick"
    verifier = local_verifier(repo, (quick,))
    try:
        broken = {"skills/s/SKILL.md": "# BROKEN\n"}
        assert verifier.evaluate(broken, [quick], 3).rewards == {quick: (0.0, 0.0, 0.0)}
        problem = verifier.candidate_error(broken)
        assert problem is not None
        assert "the skill says BROKEN" in problem
        assert verifier.usage()["children"] == 1  # sweeps 1 and 2 would fail the same way
        fine = {"skills/s/SKILL.md": "# fine\n"}
        assert verifier.evaluate(fine, [quick], 3).rewards == {quick: (1.0, 1.0, 1.0)}
        assert verifier.usage()["children"] == 1 + 3
    finally:
        verifier.close()
