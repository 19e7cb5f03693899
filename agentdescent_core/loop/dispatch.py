"""The order a synchronous round starts its units in, and the slots that keep to it.

Without a duration estimator a round starts its workers' units in worker
order, as it always did.  With one, :func:`plan_units` first picks each
worker's first task (from the sampler, exactly as the unit would have) and
orders the units longest first by that task's estimate
(:meth:`~agentdescent_core.loop.durations.DurationEstimator.longest_first`):
the classic LPT rule, which keeps a long rollout from starting last and
stretching the round past the barrier.

:class:`OrderedSlots` is the concurrency limit of the threaded round
(``max_concurrency`` units at once).  Unlike a semaphore, whose waiters wake
in whatever order the threads reach it, it admits units strictly in the order
their tickets were drawn, so the planned order is the order they start.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from agentdescent_core.loop.parallel import Shard
from agentdescent_core.loop.worker import WorkerContext


def plan_units(ctx: WorkerContext, workers: Sequence[int], shards: Sequence[Shard]
               ) -> list[tuple[int, str | None]]:
    """``(worker, first task)`` in the order the round starts them (first task None: unpicked).

    With no estimator the order is ``workers`` and nothing is picked ahead, so
    a run without one behaves as before.
    """
    if ctx.durations is None:
        return [(worker, None) for worker in workers]
    firsts = [ctx.pick(worker, shards[worker].tasks, set()) for worker in workers]
    return [(workers[i], firsts[i]) for i in ctx.durations.longest_first(firsts)]


class OrderedSlots:
    """At most ``capacity`` holders at once, admitted in the order of their tickets.

    Draw a ticket with :meth:`ticket` (in the planned order, on the thread
    that plans), then hold a slot with ``with slots.turn(ticket):`` on the
    unit's thread.  Every ticket drawn must take its turn, or the ones after
    it wait forever; a slot held by an abandoned unit stays taken until that
    unit returns, as with a semaphore.
    """

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"OrderedSlots capacity must be an integer >= 1, got {capacity!r}")
        self._free = capacity
        self._drawn = 0
        self._admitted = 0
        self._changed = threading.Condition()

    def ticket(self) -> int:
        """The next ticket: its holder is admitted after every ticket drawn before it."""
        with self._changed:
            number = self._drawn
            self._drawn += 1
            return number

    @contextmanager
    def turn(self, ticket: int) -> Iterator[None]:
        """Wait until ``ticket`` is next and a slot is free; hold the slot for the block."""
        with self._changed:
            self._changed.wait_for(lambda: self._admitted == ticket and self._free > 0)
            self._admitted += 1
            self._free -= 1
            self._changed.notify_all()
        try:
            yield
        finally:
            with self._changed:
                self._free += 1
                self._changed.notify_all()
