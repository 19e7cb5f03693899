"""Simulated suites that check an acceptance policy against the acceptance criteria.

A scenario gives every task a pass probability for the base and for the
candidate; a trial draws a fresh base evaluation and a fresh candidate
evaluation from those probabilities, asks the policy, and keeps evaluating
the candidate while the policy asks for more repeats.  The acceptance rate
over many trials is then the false-accept rate (when nothing changed) or the
power (when something did).  Used by the test suite and by
``python -m bench.acceptance`` alike, so the numbers in the docs are the
numbers the tests check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from scipy import stats

from agentdescent_core.stats.policies import (
    DEFAULT_REPEATS,
    AcceptancePolicy,
    Sequential,
    baseline_repeats,
)
from agentdescent_core.stats.samples import TaskSamples

MAX_LOOKS = 16  # a policy that keeps asking for repeats is a bug, not a scenario


@dataclass(frozen=True)
class Scenario:
    """Per-task pass probabilities of a base and a candidate, and what should happen."""

    name: str
    description: str
    base_pass: tuple[float, ...]
    candidate_pass: tuple[float, ...]
    expect: Literal["accept", "reject"]
    noise: float = 0.0
    """0: pass/fail runs (pass with the task's probability).  Above 0: graded runs,
    the task's value plus uniform noise on [-noise, noise], clipped to [0, 1]."""

    def __post_init__(self) -> None:
        if len(self.base_pass) != len(self.candidate_pass) or not self.base_pass:
            raise ValueError(f"scenario {self.name!r}: need one probability per task for both")
        for p in (*self.base_pass, *self.candidate_pass):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"scenario {self.name!r}: pass probability {p} not in [0, 1]")

    @property
    def tasks(self) -> int:
        return len(self.base_pass)


def deterministic_scenario(tasks: int = 20, failing: int = 8) -> Scenario:
    """Every test always gives the same outcome; the candidate fixes one failing test."""
    base = (1.0,) * (tasks - failing) + (0.0,) * failing
    candidate = (1.0,) * (tasks - failing + 1) + (0.0,) * (failing - 1)
    return Scenario(
        "deterministic",
        f"{tasks} deterministic tasks, {failing} failing; the candidate fixes one, breaks none",
        base,
        candidate,
        "accept",
    )


def flaky_null_scenario(tasks: int = 20, p: float = 0.6) -> Scenario:
    """Every evaluation passes with probability ``p`` whatever the artifact."""
    return Scenario(
        "flaky-no-effect",
        f"{tasks} flaky tasks passing with probability {p} for base and candidate alike",
        (p,) * tasks,
        (p,) * tasks,
        "reject",
    )


def flaky_effect_scenario(
    tasks: int = 20, improved: int = 5, before: float = 0.3, after: float = 0.8, others: float = 0.6
) -> Scenario:
    """``improved`` tasks go from ``before`` to ``after``; the rest stay flaky at ``others``."""
    rest = tasks - improved
    return Scenario(
        "flaky-real-effect",
        f"{improved} of {tasks} tasks go from pass probability {before} to {after}; "
        f"the other {rest} pass with {others} for base and candidate alike",
        (before,) * improved + (others,) * rest,
        (after,) * improved + (others,) * rest,
        "accept",
    )


def graded_null_scenario(tasks: int = 20, value: float = 0.5, noise: float = 0.3) -> Scenario:
    """Graded rewards: every run scores ``value`` plus uniform noise, whatever the artifact."""
    return Scenario(
        "graded-no-effect",
        f"{tasks} graded tasks scoring {value} +- uniform noise {noise} for base and "
        "candidate alike",
        (value,) * tasks,
        (value,) * tasks,
        "reject",
        noise=noise,
    )


def standard_scenarios() -> tuple[Scenario, Scenario, Scenario]:
    """The three scenarios of the acceptance criteria, in the order the docs list them."""
    return deterministic_scenario(), flaky_null_scenario(), flaky_effect_scenario()


@dataclass(frozen=True)
class ScenarioResult:
    """Acceptance rate of one policy on one scenario, and what the candidates cost."""

    scenario: str
    policy: str
    trials: int
    accepted: int
    rate: float
    ci_low: float
    ci_high: float
    candidate_runs: float
    """Mean task evaluations spent per candidate (tasks x repeats, over all looks)."""
    candidate_repeats: float
    """Mean repeats per task spent per candidate."""
    base_runs: int
    """Task evaluations of the base paid once per version, shared by its candidates (for a
    sequential policy: the screen's one run per task, which is the version's baseline)."""
    extra_base_runs: float = 0.0
    """Mean base runs drawn for one candidate beyond ``base_runs`` (sequential policies)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _draw(rng: np.random.Generator, probs: Sequence[float], repeats: int,
          noise: float = 0.0) -> np.ndarray:
    p = np.asarray(probs, dtype=np.float64)[:, None]
    if noise > 0.0:
        jitter = rng.uniform(-noise, noise, (p.shape[0], repeats))
        return np.asarray(np.clip(p + jitter, 0.0, 1.0), dtype=np.float64)
    return (rng.random((p.shape[0], repeats)) < p).astype(np.float64)


def _sequential(policy: Sequential, scenario: Scenario, nodeids: Sequence[str],
                rng: np.random.Generator) -> tuple[bool, int, int]:
    """One candidate through a sequential policy: (accepted, candidate runs, base runs).

    Pair ``i`` of a task is the base's run ``i`` against the candidate's run
    ``i``, as the aggregator's memoising verifier pairs them.  Every run a
    trial could use is drawn up front (common random numbers), so what a pair
    shows does not depend on how the test groups its draws into batches, and
    two versions of a policy face the same runs.
    """
    depth = int(getattr(policy, "task_cap", 64))
    base = _draw(rng, scenario.base_pass, depth, scenario.noise)
    cand = _draw(rng, scenario.candidate_pass, depth, scenario.noise)
    test = policy.open(nodeids)
    index = {t: i for i, t in enumerate(nodeids)}
    used = [0] * len(nodeids)
    spent = 0
    while batch := test.next_batch():
        for task in batch:
            row = index[task]
            pair = used[row]
            if pair >= depth:
                raise RuntimeError(f"{policy.name!r} drew more than {depth} pairs on {task}")
            used[row] += 1
            test.add(task, float(base[row, pair]), float(cand[row, pair]))
        spent += len(batch)
    return test.decision().accept, spent, spent


def _samples(nodeids: Sequence[str], outcomes: np.ndarray) -> TaskSamples:
    return TaskSamples({t: outcomes[i].tolist() for i, t in enumerate(nodeids)})


def simulate(
    policy: AcceptancePolicy | Sequential,
    scenario: Scenario,
    *,
    trials: int,
    repeats: int = DEFAULT_REPEATS,
    base_repeats: int | None = None,
    seed: int = 0,
    version: int = 0,
) -> ScenarioResult:
    """Run ``trials`` independent base/candidate evaluations of ``scenario`` through ``policy``.

    A :class:`~agentdescent_core.stats.policies.Sequential` policy (``betting``)
    is fed pair by pair, each pair a fresh base run and a fresh candidate run,
    and the base's screen runs count as the version's baseline (``base_runs``),
    the rest as ``extra_base_runs``.  Any other policy: the candidate starts with
    ``repeats`` per task and gets whatever more the policy asks for; the base gets
    ``base_repeats`` (default
    :func:`baseline_repeats` of ``repeats``) and is drawn afresh each trial,
    so the rate is over both sources of luck.
    """
    if trials < 1:
        raise ValueError(f"trials must be at least 1, got {trials}")
    b_repeats = baseline_repeats(repeats) if base_repeats is None else base_repeats
    rng = np.random.default_rng(seed)
    nodeids = [f"tests/test_suite.py::test_task_{i:02d}" for i in range(scenario.tasks)]
    accepted = 0
    spent = 0
    if isinstance(policy, Sequential):
        base_spent = 0
        for _ in range(trials):
            ok, cand_runs, base_runs = _sequential(policy, scenario, nodeids, rng)
            accepted += ok
            spent += cand_runs
            base_spent += base_runs
        return _result(policy, scenario, trials, accepted, spent, scenario.tasks,
                       extra_base=(base_spent / trials) - scenario.tasks)
    for _ in range(trials):
        base = _samples(nodeids, _draw(rng, scenario.base_pass, b_repeats, scenario.noise))
        candidate = _samples(nodeids, _draw(rng, scenario.candidate_pass, repeats,
                                            scenario.noise))
        decision = policy.decide(base, candidate, version=version)
        for _look in range(MAX_LOOKS):
            if decision.more_repeats <= 0:
                break
            more = _samples(nodeids, _draw(rng, scenario.candidate_pass, decision.more_repeats,
                                           scenario.noise))
            candidate = candidate.extended(more)
            decision = policy.decide(base, candidate, version=version)
        else:
            raise RuntimeError(f"policy {policy.name!r} asked for repeats {MAX_LOOKS} times")
        accepted += decision.accept
        spent += candidate.evaluations
    return _result(policy, scenario, trials, accepted, spent, b_repeats * scenario.tasks)


def _result(policy: AcceptancePolicy | Sequential, scenario: Scenario, trials: int,
            accepted: int, spent: int, base_runs: int, *, extra_base: float = 0.0
            ) -> ScenarioResult:
    ci = stats.binomtest(accepted, trials).proportion_ci(confidence_level=0.95, method="exact")
    return ScenarioResult(
        scenario=scenario.name,
        policy=policy.name,
        trials=trials,
        accepted=accepted,
        rate=accepted / trials,
        ci_low=float(ci.low),
        ci_high=float(ci.high),
        candidate_runs=spent / trials,
        candidate_repeats=spent / trials / scenario.tasks,
        base_runs=base_runs,
        extra_base_runs=extra_base,
    )
