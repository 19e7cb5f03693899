"""evolve_verified end to end: a real SandboxedVerifier on a real git repository (local backend).

The agent repository's tests read ``skills/support/rules.md`` and fail with
"missing rule for WORD" until the file has a line for WORD.  A proposer that
reads those messages and adds the missing rule is enough to fix the suite, so
each test is a small, real ``pytest --evolve``: child pytest runs in
workspaces, the aggregator's statistics, commits on the user's dev branch.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import snapshot, user_git, write
from sandbox_support import child_pytest_args, require_backend

from agentdescent_core.aggregator import AggregatorConfig
from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.errors import ContractError
from agentdescent_core.evaluation.callable import Rollout
from agentdescent_core.evaluation.protocol import TaskSplit
from agentdescent_core.evaluation.sandboxed import Observation, SandboxedVerifier
from agentdescent_core.governance import FrozenSet
from agentdescent_core.ledger.ledger import Ledger
from agentdescent_core.loop.result import RoundInfo
from agentdescent_core.loop.verified import evolve_verified
from agentdescent_core.loop.worker import EngineVerifier, ProposalSite
from agentdescent_core.tasks import Task

RULES = "skills/support/rules.md"
WORDS = ("refund", "shipping", "warranty")
TEST_RULES = '''\
import pathlib

import pytest

RULES = (pathlib.Path(__file__).resolve().parents[1] / "skills/support/rules.md").read_text()


@pytest.mark.parametrize("word", WORDS_HERE)
def test_knows(word):
    assert f"- {word}:" in RULES, f"missing rule for {word}"


def test_rules_stay_short():
    assert len(RULES.splitlines()) < 40, "the rules file grew too long"
'''.replace("WORDS_HERE", repr(WORDS))
TASKS = tuple(f"tests/test_rules.py::test_knows[{w}]" for w in WORDS)
GUARD = "tests/test_rules.py::test_rules_stay_short"
START = "# Support rules\n\n- greeting: say hello\n"


@dataclass
class Run:
    repo: Path
    base: str
    tree: FileTree
    ledger: Ledger
    verifier: SandboxedVerifier


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    repo = tmp_path / "agent"
    user_git(tmp_path, "init", "--quiet", "--initial-branch=main", repo.name)
    write(repo / "pytest.ini", "[pytest]\ntestpaths = tests\n")
    write(repo / RULES, START)
    write(repo / "tests/test_rules.py", TEST_RULES)
    user_git(repo, "add", "-A")
    user_git(repo, "commit", "--quiet", "-m", "support bot")
    base = user_git(repo, "rev-parse", "HEAD")
    tree = FileTree(["skills"])
    ledger = Ledger(repo, tree)
    ledger.ensure_branches("HEAD")
    verifier = SandboxedVerifier(
        repo, base, TaskSplit(train=TASKS, guards=(GUARD,)), tree=tree,
        frozen=FrozenSet(artifact_roots=tree.roots, frozen_files=["tests/test_rules.py"]),
        backend=require_backend("local"), cache=None, test_timeout=20.0, run_timeout=120.0,
        workspace_parent=tmp_path, pytest_args=child_pytest_args(),
    )
    yield Run(repo, base, tree, ledger, verifier)
    verifier.close()
    ledger.close()


def add_missing_rule(rendered: str, task: Task, output: Any, score: float, *,
                     site: ProposalSite) -> dict[str, str | None] | None:
    """Learn the rule a failing test asks for from its assertion message."""
    assert isinstance(site, ProposalSite)
    assert isinstance(output, Observation)
    found = re.search(r"missing rule for (\w+)", output.record.message)
    if found is None:
        return None
    text = output.files[RULES]
    return {RULES: text + f"- {found.group(1)}: answer from the {found.group(1)} policy\n"}


def test_a_fixing_proposal_is_committed_on_dev_and_the_reward_rises(run: Run) -> None:
    before = snapshot(run.repo)
    sites: list[tuple[ProposalSite, str]] = []

    def propose(rendered: str, task: Task, output: Any, score: float, *,
                site: ProposalSite) -> dict[str, str | None] | None:
        sites.append((site, task.id))
        assert score == 0.0
        assert "==> skills/support/rules.md <==" in rendered
        return add_missing_rule(rendered, task, output, score, site=site)

    propose.wants_site = True  # type: ignore[attr-defined]
    rounds: list[RoundInfo] = []
    result = evolve_verified(
        run.verifier, run.ledger, run.tree, propose, n_workers=2, rounds=6, target_reward=1.0,
        on_round=rounds.append, agg_config=AggregatorConfig(promote_after=1),
    )

    assert result.error is None, result.error
    assert result.initial_reward == 0.0
    assert result.final_reward == 1.0
    assert result.stop_reason == "target_reward"
    assert [r.reward for r in rounds] == [r.reward for r in result.history]
    assert all(a is not None and b is not None and a <= b
               for a, b in zip([0.0] + [r.reward for r in rounds], [r.reward for r in rounds],
                               strict=False))
    assert result.outcomes().get("committed", 0) >= 1

    # the fix is a real commit on the user's dev branch, touching only the artifact
    dev = run.ledger.head("dev")
    assert run.ledger.version_of(dev) == result.version >= 1
    rules = run.ledger.read_state(dev)[RULES]
    assert all(f"- {word}:" in rules for word in WORDS)
    changed = user_git(run.repo, "diff", "--name-only", run.base, "agentdescent/dev")
    assert changed.split() == [RULES]
    assert run.ledger.head("stable") == dev  # promoted at the clean finish
    # the user's checkout is untouched, and the caller's ledger and verifier stay open
    assert snapshot(run.repo) == before
    assert user_git(run.repo, "rev-parse", "HEAD") == run.base
    assert run.verifier.evaluate(result.state, TASKS, 1).reward() == 1.0

    # every call said where it came from: this run's rounds, its two workers, the version read
    assert sites
    by_round: dict[int, set[int]] = {}
    for site, task_id in sites:
        assert isinstance(site, ProposalSite)
        assert task_id in TASKS
        assert site.worker in {"worker-0", "worker-1"}
        assert 1 <= site.round <= result.rounds
        by_round.setdefault(site.round, set()).add(site.version)
    assert by_round[1] == {0}
    versions = {info.round: info.version for info in result.history}
    for round_index, seen in by_round.items():
        previous = versions.get(round_index - 1, 0)
        assert seen == {previous}, (round_index, seen, versions)
    assert {site.worker for site, _ in sites} == {"worker-0", "worker-1"}


def test_a_classic_propose_without_site_and_no_proposal_commits_nothing(run: Run) -> None:
    calls: list[str] = []

    def propose(rendered: str, task: Task, output: Any, score: float) -> None:
        calls.append(task.id)
        return None

    result = evolve_verified(run.verifier, run.ledger, run.tree, propose, n_workers=1, rounds=2)
    assert result.error is None
    assert result.stop_reason == "rounds"
    assert result.initial_reward == result.final_reward == 0.0
    assert calls == list(TASKS) * 2  # no proposal: the worker asks about its next failure
    assert run.ledger.version_of(run.ledger.head("dev")) == 0


def test_caller_mistakes_fail_before_anything_runs(run: Run) -> None:
    def no_site(rendered: str, task: Task, output: Any, score: float) -> None:
        return None

    no_site.wants_site = True  # type: ignore[attr-defined]
    with pytest.raises(ContractError, match="site"):
        evolve_verified(run.verifier, run.ledger, run.tree, no_site)
    with pytest.raises(ContractError, match="lacks"):
        evolve_verified(object(), run.ledger, run.tree, add_missing_rule)  # type: ignore[arg-type]
    assert run.verifier.evaluations == 0
    assert not run.verifier.ever_succeeded


def succeeded(verifier: EngineVerifier) -> bool:
    """A call, not the property, so mypy does not carry a first ``not`` past a rollout."""
    return verifier.ever_succeeded


def test_the_sandboxed_verifier_answers_the_workers_questions(run: Run) -> None:
    verifier = run.verifier
    assert isinstance(verifier, EngineVerifier)
    state = {RULES: START + "- refund: say when\n"}
    assert verifier.task(TASKS[0]) == Task(TASKS[0], "")
    assert verifier.render(state) == run.tree.render(state)
    assert not succeeded(verifier)

    fixed = verifier.rollout(state, TASKS[0], 0)
    assert isinstance(fixed, Rollout)
    assert fixed.reward == 1.0
    assert fixed.output == Observation(state, fixed.output.record)
    assert fixed.output.record.outcome == "passed"
    assert verifier.ever_succeeded

    missing = verifier.rollout(state, TASKS[1], 0)
    assert missing.reward == 0.0
    assert missing.repeat == 0
    assert "missing rule for shipping" in missing.output.record.message
    runs = verifier.evaluations
    assert verifier.rollout(state, TASKS[1], 0) == missing  # memoised: no second child
    assert verifier.evaluate(state, TASKS[:2], 1).rewards == {TASKS[0]: (1.0,),
                                                              TASKS[1]: (0.0,)}
    assert verifier.evaluations == runs

    with pytest.raises(ValueError, match="unknown task"):
        verifier.rollout(state, "tests/test_rules.py::nope", 0)
    # without its rules file the test module does not import: the candidate fails as a whole
    broken = {"skills/support/notes.md": "no rules here\n"}
    ruled_out = verifier.rollout(broken, TASKS[0], 0)
    assert ruled_out.reward == 0.0
    assert ruled_out.output.record.outcome == "error"
    assert ruled_out.output.record.message.startswith("collection-error: ")
    assert "FileNotFoundError" in ruled_out.output.record.message


def test_a_scratch_ledger_leaves_every_ref_of_the_users_repository_alone(run: Run) -> None:
    refs = user_git(run.repo, "for-each-ref", "--format=%(refname) %(objectname)")
    start = run.tree.load_git(run.ledger.git.commit(run.base).tree)
    with Ledger.scratch(start, run.tree) as scratch:
        result = evolve_verified(run.verifier, scratch, run.tree, add_missing_rule,
                                 n_workers=1, rounds=1)
        assert result.error is None
        assert result.repo_path is None
        assert result.version == 1
        assert result.final_reward is not None
        assert result.final_reward > result.initial_reward  # type: ignore[operator]
        assert scratch.read_state(scratch.head("dev"))[RULES].startswith(START + "- ")
    assert user_git(run.repo, "for-each-ref", "--format=%(refname) %(objectname)") == refs


add_missing_rule.wants_site = True  # type: ignore[attr-defined]


def test_evolve_passes_the_site_too_when_propose_asks_for_it() -> None:
    from agentdescent_core.loop import evolve

    seen: list[ProposalSite] = []

    def propose(rendered: str, task: Task, output: Any, score: float, *,
                site: ProposalSite) -> str:
        seen.append(site)
        return f"say {task.prompt}"

    propose.wants_site = True  # type: ignore[attr-defined]
    result = evolve(
        [Task(f"t{i}", w) for i, w in enumerate(("hi", "bye"))],
        lambda task, out: 1.0 if f"say {task.prompt}" in out else 0.0,
        run=lambda rendered, task: rendered, propose=propose, n_workers=2, rounds=2,
        held_out_frac=0.0,
    )
    assert result.error is None
    assert seen
    assert {s.worker for s in seen} <= {"worker-0", "worker-1"}
    assert seen[0] == ProposalSite(1, seen[0].worker, 0)
