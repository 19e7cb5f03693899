"""The run's call and time budget, shared by every thread of a run.

``max_calls`` counts calls into the caller's backend — every attempt at
``run`` (rollouts and evaluations alike) and every attempt at ``propose`` —
so retries are paid for.  It is charged *before* a call, and the call that
would exceed it raises :class:`BudgetExhausted` instead of being made; the
loop catches that and stops with ``stop_reason == "max_calls"``.  Time is
checked between units of work (``expired``), never by interrupting a call.
"""

from __future__ import annotations

import threading
import time

from agentdescent_core.errors import BudgetExhausted as BudgetExhausted
from agentdescent_core.stops import StopReason


class Budget:
    """Thread-safe counters of backend calls, with an optional cap and deadline."""

    def __init__(self, *, max_calls: int | None = None, max_seconds: float | None = None) -> None:
        if max_calls is not None and (
            isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 1
        ):
            raise ValueError(f"max_calls must be a positive integer or None, got {max_calls!r}")
        if max_seconds is not None and (
            isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float))
            or not max_seconds > 0
        ):
            raise ValueError(f"max_seconds must be a positive number or None, got {max_seconds!r}")
        self.max_calls = max_calls
        self.max_seconds = None if max_seconds is None else float(max_seconds)
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {"run": 0, "propose": 0}

    @property
    def calls(self) -> int:
        return sum(self.counts.values())

    def charge(self, kind: str) -> None:
        """Count one call of ``kind`` ("run" or "propose"), or raise when the cap is reached."""
        with self._lock:
            if self.max_calls is not None and self.calls >= self.max_calls:
                raise BudgetExhausted(
                    StopReason.MAX_CALLS,
                    f"the call budget max_calls={self.max_calls} is spent "
                    f"({self.counts['run']} run, {self.counts['propose']} propose calls)",
                )
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def charge_run(self) -> None:
        self.charge("run")

    def charge_propose(self) -> None:
        self.charge("propose")

    @property
    def exhausted(self) -> bool:
        with self._lock:
            return self.max_calls is not None and self.calls >= self.max_calls

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining_seconds(self) -> float | None:
        if self.max_seconds is None:
            return None
        return max(0.0, self.max_seconds - self.elapsed())

    def expired(self) -> bool:
        remaining = self.remaining_seconds()
        return remaining is not None and remaining <= 0.0

    def usage(self) -> dict[str, float]:
        with self._lock:
            return {
                "calls": float(self.calls),
                "run_calls": float(self.counts["run"]),
                "propose_calls": float(self.counts["propose"]),
                "seconds": round(self.elapsed(), 3),
            }
