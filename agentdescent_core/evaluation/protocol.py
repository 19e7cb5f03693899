"""The contract between whoever can score an artifact and the aggregator that needs scores.

``evolve()`` builds a verifier from ``run`` + ``reward``; the pytest plugin builds
one that runs the marked tests in a sandboxed workspace.  The aggregator only
sees this protocol, so both drive the same merge pipeline.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from agentdescent_core.errors import RefusalError
from agentdescent_core.stats.samples import TaskSamples


@dataclass(frozen=True)
class TaskSplit:
    """Which task ids play which role.

    ``train`` tasks are shown to proposers; ``held_out`` tasks never are, and
    when there are any, acceptance, the target reward and patience are measured
    on them (``eval_tasks``), else on ``train``.  With ``eval_on_all`` they are
    measured on train and held-out tasks together (the pytest plugin's rule:
    the reward is the whole suite's, the held-out part is only hidden from the
    proposer and reported apart).  ``guards`` must keep passing for a
    candidate to be accepted.  ``weights`` default to 1.0.
    """

    train: tuple[str, ...]
    held_out: tuple[str, ...] = ()
    guards: tuple[str, ...] = ()
    weights: Mapping[str, float] = field(default_factory=dict)
    eval_on_all: bool = False

    def __post_init__(self) -> None:
        overlap = set(self.train) & set(self.held_out)
        if overlap:
            raise ValueError(
                f"tasks cannot be both train and held-out: {sorted(overlap)[:5]}"
            )

    @property
    def eval_tasks(self) -> tuple[str, ...]:
        if self.eval_on_all:
            return tuple(dict.fromkeys((*self.train, *self.held_out)))
        return self.held_out or self.train

    @property
    def all_tasks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.train, *self.held_out, *self.guards)))

    def weight(self, task_id: str) -> float:
        return float(self.weights.get(task_id, 1.0))

    def samples(self, rewards: dict[str, list[float]]) -> TaskSamples:
        """``rewards`` (task id -> rewards by repeat) with this split's weights."""
        weights = {t: self.weight(t) for t in rewards if self.weight(t) != 1.0}
        return TaskSamples(rewards, weights)


def requested_tasks(task_ids: Sequence[str], repeats: int, known: Container[str]) -> list[str]:
    """The distinct task ids of an ``evaluate`` request, in order, after checking it.

    ValueError for fewer than one repeat, no task id, or an id not in ``known``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    ids = list(dict.fromkeys(task_ids))
    if not ids:
        raise ValueError("evaluate() needs at least one task id")
    for task_id in ids:
        if task_id not in known:
            raise ValueError(f"unknown task id {task_id!r}; the run has no such task")
    return ids


@runtime_checkable
class Verifier(Protocol):
    """Scores artifact states; every evaluation in a run goes through one of these."""

    @property
    def split(self) -> TaskSplit: ...

    @property
    def evaluations(self) -> int:
        """Task evaluations actually run so far (cache hits not counted)."""
        ...

    def evaluate(
        self, state: Mapping[str, str], task_ids: Sequence[str], repeats: int
    ) -> TaskSamples:
        """The first ``repeats`` rewards of each task for ``state``.

        Repeats already measured for the same state (by content) are reused, so
        asking again with a larger ``repeats`` only runs the missing ones.
        Raises ContractError for a malformed reward, BackendError when the
        backend keeps failing after its retries.
        """
        ...


@runtime_checkable
class Disqualifying(Protocol):
    """A verifier that can rule a state out whatever its tests said.

    The sandboxed verifier implements it: a candidate whose run changed a
    frozen file is disqualified (``frozen-violation``).  The aggregator asks
    after evaluating a candidate and reports the refusal's category instead
    of a score.
    """

    def disqualification(self, state: Mapping[str, str]) -> RefusalError | None:
        """The refusal that rules ``state`` out, or None (also when never evaluated)."""
        ...


@runtime_checkable
class Selective(Protocol):
    """A verifier that knows which tasks a change can reach (read-based selection).

    The sandboxed verifier implements it from the reads its children record.
    The acceptance test pairs only the tasks :meth:`select_tests` names: the
    others cannot tell the candidate from the base, so their pairs would cost
    runs and carry no evidence.  :meth:`confirm` re-runs, before a promotion,
    what a state kept instead of running.
    """

    def select_tests(self, base: Mapping[str, str], candidate: Mapping[str, str],
                     task_ids: Sequence[str]) -> SelectedTests: ...

    def confirm(self, state: Mapping[str, str]) -> list[str]: ...


class SelectedTests(Protocol):
    """What :meth:`Selective.select_tests` answers: the tasks to pair, and what changed."""

    @property
    def selected(self) -> tuple[str, ...]: ...

    @property
    def touched(self) -> tuple[str, ...]: ...
