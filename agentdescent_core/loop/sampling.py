"""Task samplers: which task of its shard a worker rolls out next.

A rollout on a task the agent already solves teaches nothing (no failure, no
proposal), and neither does one on a task it can never solve; only the tasks
in between carry signal.  :class:`RoundRobin` is the deterministic default;
:class:`DifficultyWeighted` spends rollouts where the observed pass rate is
closest to one half, with an exploration bonus so untried tasks get a look.

A sampler is any object with ``next_task(worker, shard, rng, exclude)`` and
``observe(task_id, reward)``; the driver calls both under its own lock, so a
sampler need not be thread-safe.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class TaskSampler(Protocol):
    def next_task(
        self, worker: int, shard: Sequence[str], rng: random.Random, exclude: Collection[str] = ()
    ) -> str | None:
        """A task id of ``shard`` not in ``exclude``, or None when none is left."""
        ...

    def observe(self, task_id: str, reward: float) -> None:
        """Record a rollout's reward (samplers that do not learn ignore it)."""
        ...


class RoundRobin:
    """Cycle through the shard, one cursor per worker: deterministic and uniform."""

    name = "round-robin"

    def __init__(self) -> None:
        self._cursor: dict[int, int] = {}

    def __repr__(self) -> str:
        return "RoundRobin()"

    def next_task(
        self, worker: int, shard: Sequence[str], rng: random.Random, exclude: Collection[str] = ()
    ) -> str | None:
        if not shard:
            return None
        start = self._cursor.get(worker, 0)
        for step in range(len(shard)):
            index = (start + step) % len(shard)
            if shard[index] not in exclude:
                self._cursor[worker] = index + 1
                return shard[index]
        return None

    def observe(self, task_id: str, reward: float) -> None:
        return None


class DifficultyWeighted:
    """Sample in proportion to ``4 p (1 - p)`` plus a UCB exploration bonus.

    ``p`` is the task's mean observed reward (a pass rate for 0/1 rewards).
    ``c`` scales the bonus ``c * sqrt(ln N / (n + 1))`` (``N`` rollouts so far,
    ``n`` of this task); ``floor`` keeps every task's weight positive, so a task
    that seems solved is still revisited now and then (the artifact changes).
    """

    name = "difficulty-weighted"

    def __init__(self, c: float = 0.5, floor: float = 0.02) -> None:
        if not c >= 0 or not floor > 0:
            raise ValueError(f"DifficultyWeighted needs c >= 0 and floor > 0, got {c}, {floor}")
        self.c = float(c)
        self.floor = float(floor)
        self._sum: dict[str, float] = {}
        self._n: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"DifficultyWeighted(c={self.c}, floor={self.floor})"

    def weight(self, task_id: str) -> float:
        n = self._n.get(task_id, 0)
        total = sum(self._n.values())
        bonus = self.c * math.sqrt(math.log(total + 1) / (n + 1)) if self.c else 0.0
        if n == 0:
            return 1.0 + bonus
        p = self._sum[task_id] / n
        return max(self.floor, 4.0 * p * (1.0 - p)) + bonus

    def next_task(
        self, worker: int, shard: Sequence[str], rng: random.Random, exclude: Collection[str] = ()
    ) -> str | None:
        candidates = [t for t in shard if t not in exclude]
        if not candidates:
            return None
        weights = [self.weight(t) for t in candidates]
        return rng.choices(candidates, weights=weights, k=1)[0]

    def observe(self, task_id: str, reward: float) -> None:
        self._sum[task_id] = self._sum.get(task_id, 0.0) + float(reward)
        self._n[task_id] = self._n.get(task_id, 0) + 1
