"""How long a task's rollout takes: the estimate behind longest-first dispatch and stragglers.

Rollout durations are heavy-tailed: most tasks answer in a moment, a few take
many times longer.  In a round with a barrier the slowest unit sets the pace,
and a long rollout started last makes the round longer than it has to be.
:class:`DurationEstimator` keeps one number per task id, an exponentially
weighted mean of the seconds its rollouts took (``alpha`` weights the newest
observation), and the drivers use it for two things:

* **longest first** — :meth:`DurationEstimator.longest_first` orders a
  round's units by the estimate of the first task each will roll out, longest
  first (LPT list scheduling), with tasks never seen before ahead of all known
  ones: nothing is known about them, they may be the longest, and running them
  is how the estimate is learned;
* **stragglers** — a rollout is a :class:`Straggler` when it overran what was
  predicted for it at dispatch: it took more than ``straggler_factor`` times
  the prediction *and* at least ``min_overrun`` seconds more (so that jitter on
  instant rollouts is not called a straggler).  The prediction is the task's
  own estimate, or, for a task never seen, the median estimate of the tasks
  seen so far; a rollout with no prediction at all (nothing seen yet) is never
  a straggler.  A task that is always slow is therefore a straggler at most
  once, when it first shows its duration: after that it is merely long, and
  longest-first dispatch starts it early.

Only rollouts that really ran are observed: one answered from the verifier's
memo has no duration (``Rollout.seconds`` is None).  The estimator is safe to
share between threads and between runs (pass the same one again and the next
run starts with known durations).
"""

from __future__ import annotations

import math
import statistics
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Straggler:
    """One rollout that overran its prediction: which task, where, predicted vs. observed."""

    task_id: str
    round: int
    worker: str
    predicted: float
    seconds: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Straggler:
        return cls(task_id=str(data["task_id"]), round=int(data["round"]),
                   worker=str(data["worker"]), predicted=float(data["predicted"]),
                   seconds=float(data["seconds"]))


def _positive_number(name: str, value: object, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"DurationEstimator {name} must be a finite number {bound}, "
                         f"got {value!r}")
    return float(value)


class DurationEstimator:
    """Per-task duration estimates (an exponentially weighted mean of observed seconds).

    Pass one as ``duration_estimator=`` to ``evolve()`` (units of a round start
    longest first, stragglers are recorded) or ``async_evolve()`` (stragglers
    are recorded; there is no round to order).  ``alpha`` in (0, 1] is the
    weight of the newest observation; ``straggler_factor`` > 1 and
    ``min_overrun`` >= 0 seconds define a straggler (see the module doc).
    """

    def __init__(self, alpha: float = 0.5, straggler_factor: float = 2.0,
                 min_overrun: float = 0.05) -> None:
        self.alpha = _positive_number("alpha", alpha)
        if self.alpha > 1:
            raise ValueError(f"DurationEstimator alpha must be in (0, 1] (the weight of the "
                             f"newest observation), got {alpha!r}")
        self.straggler_factor = _positive_number("straggler_factor", straggler_factor)
        if self.straggler_factor <= 1:
            raise ValueError(f"DurationEstimator straggler_factor must be > 1 (how many times "
                             f"its prediction a rollout may take), got {straggler_factor!r}")
        self.min_overrun = _positive_number("min_overrun", min_overrun, allow_zero=True)
        self._lock = threading.Lock()
        self._estimates: dict[str, float] = {}

    def __repr__(self) -> str:
        return (f"DurationEstimator(alpha={self.alpha}, straggler_factor={self.straggler_factor}, "
                f"min_overrun={self.min_overrun}, known={len(self._estimates)})")

    def estimates(self) -> dict[str, float]:
        """A copy of the current estimates, task id -> seconds."""
        with self._lock:
            return dict(self._estimates)

    def estimate(self, task_id: str) -> float | None:
        """The task's own estimate in seconds, or None when it was never observed."""
        with self._lock:
            return self._estimates.get(task_id)

    def predict(self, task_id: str) -> float | None:
        """What a rollout of ``task_id`` is expected to take, for the straggler test.

        The task's estimate; for an unseen task the median estimate of the seen
        ones; None when nothing was seen yet.
        """
        with self._lock:
            own = self._estimates.get(task_id)
            if own is not None:
                return own
            if not self._estimates:
                return None
            return float(statistics.median(self._estimates.values()))

    def observe(self, task_id: str, seconds: float) -> None:
        """Fold one real rollout's duration into the task's estimate."""
        seconds = max(0.0, float(seconds))
        with self._lock:
            old = self._estimates.get(task_id)
            self._estimates[task_id] = seconds if old is None else \
                self.alpha * seconds + (1.0 - self.alpha) * old

    def overran(self, predicted: float | None, seconds: float) -> bool:
        """True when a rollout of ``seconds`` is a straggler against ``predicted``."""
        if predicted is None:
            return False
        return seconds > self.straggler_factor * predicted \
            and seconds - predicted >= self.min_overrun

    def longest_first(self, task_ids: Sequence[str | None]) -> list[int]:
        """The positions of ``task_ids`` in the order to start them: longest first.

        Unseen tasks come first, then known ones by estimate, longest first;
        None (a unit with nothing to roll out) comes last; ties keep the given
        order, so with nothing known the order is unchanged.
        """
        with self._lock:
            known = dict(self._estimates)

        def rank(position: int) -> tuple[int, float]:
            task_id = task_ids[position]
            if task_id is None:
                return (2, 0.0)
            if task_id not in known:
                return (0, 0.0)
            return (1, -known[task_id])

        return sorted(range(len(task_ids)), key=rank)


def check_estimator(estimator: object) -> DurationEstimator | None:
    """``estimator`` if it is a DurationEstimator or None, else a TypeError saying what to pass."""
    if estimator is None or isinstance(estimator, DurationEstimator):
        return estimator
    raise TypeError(
        f"duration_estimator= must be a DurationEstimator (from agentdescent_core.loop) or "
        f"None, got {type(estimator).__name__} ({estimator!r:.60}); pass "
        "duration_estimator=DurationEstimator() to start long tasks first and record stragglers"
    )
