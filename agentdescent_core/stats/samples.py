"""Evaluation results of one artifact version, and the verdicts drawn from them.

Every acceptance policy reads the same two inputs — the rewards the base and the
candidate earned on each task, one reward per repeat — and answers with an
:class:`AcceptanceDecision`.  The samples are validated once, here, so the
statistics can trust them: a reward outside [0, 1] or a NaN would silently bend
every number downstream, so it is refused with the task named.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

PASS_THRESHOLD = 0.5
"""A task "passes" at a version when its mean reward over the repeats reaches this.

With pass/fail rewards that is the majority verdict of the repeats, which is what
a person means by "this test passes" for a flaky test.
"""

FlipKind = Literal["fail->pass", "pass->fail"]


def as_reward(value: object) -> float | None:
    """``value`` as a reward (a bool counts as pass/fail), or None when it is not one.

    The one definition of a valid reward: a finite real number in [0, 1].
    Callers raise their own error, naming what produced the bad value.
    """
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if not isinstance(value, numbers.Real):
        return None
    reward = float(value)
    return reward if math.isfinite(reward) and 0.0 <= reward <= 1.0 else None


def _check_reward(nodeid: str, index: int, value: object) -> float:
    reward = as_reward(value)
    if reward is not None:
        return reward
    if not isinstance(value, numbers.Real):
        raise ValueError(
            f"task {nodeid!r}: reward #{index} is {value!r}, not a number; "
            "rewards are floats in [0, 1] (pass 1.0, fail 0.0)"
        )
    raise ValueError(
        f"task {nodeid!r}: reward #{index} is {float(value)!r}; rewards must be finite "
        "and within [0, 1] (clip or rescale graded rewards before passing them)"
    )


@dataclass(frozen=True)
class TaskSamples:
    """Rewards of one artifact version: task nodeid -> one reward per repeat.

    ``weights`` holds the ``evolve(weight=...)`` of tasks whose weight is not
    1.0; a task missing from it weighs 1.0.  Instances are immutable; use
    :meth:`extended` to add the repeats a sequential decision asked for.
    """

    rewards: Mapping[str, Sequence[float]]
    weights: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.rewards:
            raise ValueError("no tasks: evaluate at least one task before comparing versions")
        checked: dict[str, tuple[float, ...]] = {}
        for nodeid in sorted(self.rewards):
            values = self.rewards[nodeid]
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise ValueError(
                    f"task {nodeid!r}: expected a sequence of rewards (one per repeat), "
                    f"got {values!r}"
                )
            row = tuple(_check_reward(nodeid, i, v) for i, v in enumerate(values))
            if not row:
                raise ValueError(
                    f"task {nodeid!r} has no rewards; evaluate it at least once or leave it out"
                )
            checked[nodeid] = row
        weights: dict[str, float] = {}
        for nodeid, weight in self.weights.items():
            if nodeid not in checked:
                raise ValueError(
                    f"weight given for unknown task {nodeid!r}; weights must name tasks "
                    "that have rewards"
                )
            w = float(weight)
            if not math.isfinite(w) or w <= 0.0:
                raise ValueError(
                    f"task {nodeid!r}: weight {weight!r} must be a positive finite number "
                    "(set it with @pytest.mark.evolve(weight=...))"
                )
            weights[nodeid] = w
        object.__setattr__(self, "rewards", MappingProxyType(checked))
        object.__setattr__(self, "weights", MappingProxyType(weights))

    @property
    def tasks(self) -> tuple[str, ...]:
        """Task nodeids in sorted order (the order every array in the package uses)."""
        return tuple(self.rewards)

    def weight(self, nodeid: str) -> float:
        return self.weights.get(nodeid, 1.0)

    def repeats(self, nodeid: str) -> int:
        return len(self.rewards[nodeid])

    @property
    def min_repeats(self) -> int:
        """Fewest repeats any task has: what a sequential plan counts as "evaluated"."""
        return min(len(v) for v in self.rewards.values())

    @property
    def evaluations(self) -> int:
        """Total task runs these samples cost."""
        return sum(len(v) for v in self.rewards.values())

    def mean(self, nodeid: str) -> float:
        values = self.rewards[nodeid]
        return math.fsum(values) / len(values)

    def reward(self) -> float:
        """Weighted mean over tasks of each task's mean reward: the number being optimized."""
        total = math.fsum(self.weight(t) for t in self.tasks)
        return math.fsum(self.weight(t) * self.mean(t) for t in self.tasks) / total

    def extended(self, more: TaskSamples) -> TaskSamples:
        """These samples plus the repeats in ``more`` (same tasks, same weights)."""
        check_same_tasks(self, more, what="additional repeats")
        merged = {t: (*self.rewards[t], *more.rewards[t]) for t in self.tasks}
        return TaskSamples(merged, dict(self.weights))


def check_same_tasks(base: TaskSamples, candidate: TaskSamples, *, what: str = "candidate") -> None:
    """Refuse to compare versions evaluated on different tasks or with different weights."""
    missing = sorted(set(base.tasks) - set(candidate.tasks))
    extra = sorted(set(candidate.tasks) - set(base.tasks))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}")
        if extra:
            parts.append(f"unknown to the base {', '.join(extra[:5])}")
        raise ValueError(
            f"the {what} and the base were evaluated on different tasks ({'; '.join(parts)}); "
            "evaluate both on the same task list"
        )
    for t in base.tasks:
        if base.weight(t) != candidate.weight(t):
            raise ValueError(
                f"task {t!r} weighs {base.weight(t)} for the base but {candidate.weight(t)} "
                f"for the {what}; weights come from the frozen test markers and must match"
            )


@dataclass(frozen=True)
class Flip:
    """A task whose majority verdict changed between the base and the candidate."""

    nodeid: str
    before: float
    after: float
    kind: FlipKind


def find_flips(base: TaskSamples, candidate: TaskSamples) -> list[Flip]:
    """Tasks that crossed :data:`PASS_THRESHOLD`, in task order.

    Listed whatever the decision: a pass->fail flip next to an accepted
    candidate is exactly what a reviewer needs to see.
    """
    flips: list[Flip] = []
    for t in base.tasks:
        before, after = base.mean(t), candidate.mean(t)
        was, now = before >= PASS_THRESHOLD, after >= PASS_THRESHOLD
        if was != now:
            flips.append(Flip(t, before, after, "fail->pass" if now else "pass->fail"))
    return flips


@dataclass(frozen=True)
class AcceptanceDecision:
    """What a policy concluded about one candidate, with the numbers behind it.

    ``category`` is the merge outcome the aggregator counts ("committed" or
    "below-threshold").  ``more_repeats`` > 0 means "not decided yet": evaluate
    the candidate that many more times per task, extend its samples and ask
    again; ``accept`` is then False and the category "below-threshold" until
    the final look.  ``p_value`` is None for policies that are not tests.
    """

    accept: bool
    category: str
    p_improvement: float
    p_value: float | None
    threshold: float
    reward_base: float
    reward_candidate: float
    flips: list[Flip]
    reason: str
    more_repeats: int = 0
    policy: str = ""

    @property
    def regressions(self) -> list[Flip]:
        return [f for f in self.flips if f.kind == "pass->fail"]

    @property
    def fixes(self) -> list[Flip]:
        return [f for f in self.flips if f.kind == "fail->pass"]


def flip_summary(flips: Sequence[Flip]) -> str:
    """The flip counts as the reports phrase them: "1 fail->pass, 0 pass->fail"."""
    fixed = sum(1 for f in flips if f.kind == "fail->pass")
    broken = len(flips) - fixed
    return f"{fixed} fail->pass, {broken} pass->fail"
