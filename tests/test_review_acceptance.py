"""``agentdescent review`` judges with the aggregator's own acceptance code.

The review's evidence step (``reviewing._measure``) and the aggregator's
``checks.run_acceptance`` must reach the same verdict from the same runs, for the
default sequential test and for a policy of looks; the per-test table's flips
are ``stats.find_flips``'.  ``FlakyVerifier`` is a deterministic Verifier whose
run ``i`` of a task at a state is a seeded coin with that state's pass rate, and
that memoises runs as the sandboxed verifier does, so two verifiers built alike
hand out the same evidence.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

import agentdescent_core.aggregator as aggregator_package
from agentdescent_core.aggregator import AggregatorConfig
from agentdescent_core.aggregator.checks import run_acceptance
from agentdescent_core.evaluation.protocol import TaskSplit
from agentdescent_core.stats import TaskSamples, find_flips, policy_for
from pytest_agentdescent import reviewing
from pytest_agentdescent.probe import ProbedPlan
from pytest_agentdescent.reviewing import ReviewResult

BASE = {"skills/rules.md": "base"}
HEAD = {"skills/rules.md": "head"}
TASKS = tuple(f"tests/test_bot.py::test_{i}" for i in range(6))
GUARD = "tests/test_bot.py::test_guard"


@dataclass(frozen=True)
class _Backend:
    name: str = "fake"


class FlakyVerifier:
    """Task ``t`` passes at a state with probability ``rates[state][t]``, run by run."""

    def __init__(self, rates: Mapping[str, Mapping[str, float]], *, seed: int,
                 held_out: Sequence[str] = (), broken: str | None = None) -> None:
        self.rates = rates
        self.seed = seed
        train = tuple(t for t in TASKS if t not in held_out)
        self.split = TaskSplit(train=train, held_out=tuple(held_out), guards=(GUARD,),
                               eval_on_all=True)
        self.backend = _Backend()
        self.broken = broken
        self._runs: dict[tuple[str, str], list[float]] = {}

    @property
    def evaluations(self) -> int:
        return sum(len(row) for row in self._runs.values())

    def evaluate(self, state: Mapping[str, str], task_ids: Sequence[str], repeats: int
                 ) -> TaskSamples:
        label = state["skills/rules.md"]
        rewards: dict[str, list[float]] = {}
        for task in task_ids:
            row = self._runs.setdefault((label, task), [])
            while len(row) < repeats:
                coin = random.Random(f"{self.seed}:{label}:{task}:{len(row)}").random()
                row.append(1.0 if coin < self.rates[label].get(task, 1.0) else 0.0)
            rewards[task] = row[:repeats]
        return TaskSamples(rewards)

    def candidate_error(self, state: Mapping[str, str]) -> str | None:
        label = state["skills/rules.md"]
        return f"{label} does not import" if label == self.broken else None

    def disqualification(self, state: Mapping[str, str]) -> None:
        return None


def _plan() -> ProbedPlan:
    return ProbedPlan(root=Path("."), subdir="", roots=("skills",), tasks=(), guards=(GUARD,),
                      test_files=(), frozen_patterns=(), frozen_files=(), holdout_fraction=0.0,
                      settings={"repeats": 2})


def _review(verifier: FlakyVerifier, repeats: int | None = 2) -> ReviewResult:
    result = ReviewResult(base="b" * 40, head="h" * 40)
    reviewing._measure(result, _plan(), cast(Any, verifier), BASE, HEAD, repeats,
                       lambda _text: None)
    return result


def _rates(seed: int) -> dict[str, dict[str, float]]:
    rng = random.Random(seed)
    base = {t: rng.choice((0.0, 0.2, 0.5, 0.8, 1.0)) for t in TASKS}
    head = {t: min(1.0, r + rng.choice((0.0, 0.0, 0.3, 1.0))) for t, r in base.items()}
    base[GUARD], head[GUARD] = 1.0, 1.0
    return {"base": base, "head": head}


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("acceptance", ["betting", "paired"])
def test_review_reaches_the_aggregators_verdict(seed: int, acceptance: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def config(*, repeats: int) -> AggregatorConfig:
        return AggregatorConfig(repeats=repeats, acceptance=acceptance)

    monkeypatch.setattr(aggregator_package, "AggregatorConfig", config)
    held = TASKS[:2] if seed % 2 else ()
    result = _review(FlakyVerifier(_rates(seed), seed=seed, held_out=held))

    verifier = FlakyVerifier(_rates(seed), seed=seed, held_out=held)
    cfg = config(repeats=2)
    tasks = list(verifier.split.eval_tasks)
    expected = run_acceptance(verifier, policy_for(acceptance, 2), BASE, HEAD, tasks, cfg,
                              version=0).decision
    assert result.decision == expected
    assert result.ok is expected.accept
    run = run_acceptance(FlakyVerifier(_rates(seed), seed=seed, held_out=held),
                         policy_for(acceptance, 2), BASE, HEAD, tasks, cfg, version=0)
    assert result.repeats == (max(map(run.base.repeats, run.base.tasks)),
                              max(map(run.candidate.repeats, run.candidate.tasks)))
    flips = {f.nodeid: f.kind for f in find_flips(run.base, run.candidate)}
    rows = [r for r in result.rows if r.kind != "guard"]
    assert [r.nodeid for r in rows] == tasks
    assert {r.nodeid: r.flip for r in rows if r.flip} == flips
    assert {r.nodeid for r in rows if r.kind == "holdout"} == set(held)


def test_the_default_test_is_the_runs_betting_test_and_pairs_runs() -> None:
    result = _review(FlakyVerifier(_rates(3), seed=3), repeats=None)  # repeats from the plan

    assert result.decision is not None
    assert result.decision.policy == "betting"
    assert result.repeats is not None
    assert result.repeats[0] == result.repeats[1]


def test_a_base_that_does_not_run_fails_without_a_verdict() -> None:
    result = _review(FlakyVerifier(_rates(1), seed=1, broken="base"))

    assert result.decision is None
    assert result.rows == []
    assert result.failures == ["the tests do not run with the base's artifact: base does not "
                               "import"]


def test_a_guard_failing_at_head_fails_the_review_with_its_flip() -> None:
    rates = _rates(2)
    rates["head"][GUARD] = 0.0
    result = _review(FlakyVerifier(rates, seed=2))

    guard = [r for r in result.rows if r.kind == "guard"]
    assert [(r.nodeid, r.before, r.after, r.flip) for r in guard] == [
        (GUARD, 1.0, 0.0, "pass->fail")]
    assert any(f.startswith(f"guard {GUARD} fails at head") for f in result.failures)
