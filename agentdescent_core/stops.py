"""Why a run stopped: the one vocabulary of the drivers, the kernel, the controller and reports.

Three layers stop a run and each reports why: the round driver
(``EvolutionResult.stop_reason``, which ``report.json`` shows), the durable
kernel (``LoopReport.stopped_reason``, kept in the run store) and the session
controller (``ControllerReport.stopped_reason``).  Their words differ where
their units differ — the kernel counts *generations* and a generic *cost*, the
driver counts *rounds* and proposer *calls* — so each layer keeps its own
subset, but every word is a member of :class:`StopReason` and the translation
between the kernel and the report is the table here, nowhere else.

Members are ``str`` subclasses equal to their value, so records written before
this enum existed (the run store, ``report.json``, the sessions ref) read back
unchanged and compare equal.
"""

from __future__ import annotations

from enum import Enum


class StopReason(str, Enum):
    """Every reason a run can stop, in the words its records use."""

    # the round driver and report.json
    ROUNDS = "rounds"
    TARGET_REWARD = "target_reward"
    PATIENCE = "patience"
    MAX_CALLS = "max_calls"
    MAX_SECONDS = "max_seconds"
    MAX_USD = "max_usd"
    MAX_TOKENS = "max_tokens"
    MAX_ITERS = "max_iters"
    ERROR = "error"
    KILL_SWITCH = "kill-switch"
    SESSION_SKIPPED = "session-skipped"
    # the durable kernel's own units
    MAX_GENERATIONS = "max_generations"
    TARGET = "target"
    BUDGET = "budget"
    RISK = "risk"
    CANCELLED = "cancelled"
    CONFIG = "config"
    # the session controller
    SESSIONS = "sessions"

    def __str__(self) -> str:  # f-strings and str() give the record's word on every Python
        return str(self.value)

    # equal to and hashed as the plain word, so either finds the other in a dict or set
    __hash__ = str.__hash__


#: What ``EvolutionResult.stop_reason`` can say after ``evolve()`` / ``async_evolve()``.
DRIVER_REASONS: tuple[StopReason, ...] = (
    StopReason.TARGET_REWARD, StopReason.PATIENCE, StopReason.ROUNDS, StopReason.MAX_SECONDS,
    StopReason.MAX_CALLS, StopReason.MAX_USD, StopReason.MAX_TOKENS, StopReason.MAX_ITERS,
    StopReason.ERROR,
)

#: What a durable ``pytest --evolve`` run's result can say besides the driver's words.
RUN_REASONS: tuple[StopReason, ...] = (
    *DRIVER_REASONS, StopReason.KILL_SWITCH, StopReason.SESSION_SKIPPED,
)

#: What ``LoopReport.stopped_reason`` can say (the kernel's units: generations, cost).
KERNEL_REASONS: tuple[StopReason, ...] = (
    StopReason.MAX_GENERATIONS, StopReason.TARGET, StopReason.BUDGET, StopReason.PATIENCE,
    StopReason.RISK, StopReason.CANCELLED, StopReason.KILL_SWITCH, StopReason.ERROR,
    StopReason.CONFIG,
)

#: What ``ControllerReport.stopped_reason`` can say.
CONTROLLER_REASONS: tuple[StopReason, ...] = (
    StopReason.SESSIONS, StopReason.BUDGET, StopReason.KILL_SWITCH, StopReason.ERROR,
    StopReason.PATIENCE,
)

# One generation of the durable run is one round, and its cost is its proposer calls:
# so the kernel's words map onto the report's one to one.
_KERNEL_TO_RUN: dict[StopReason, StopReason] = {
    StopReason.MAX_GENERATIONS: StopReason.ROUNDS,
    StopReason.TARGET: StopReason.TARGET_REWARD,
    StopReason.BUDGET: StopReason.MAX_CALLS,
    StopReason.PATIENCE: StopReason.PATIENCE,
    StopReason.KILL_SWITCH: StopReason.KILL_SWITCH,
    StopReason.CANCELLED: StopReason.KILL_SWITCH,
}
_RUN_TO_KERNEL: dict[StopReason, StopReason] = {
    StopReason.TARGET_REWARD: StopReason.TARGET,
    StopReason.PATIENCE: StopReason.PATIENCE,
    StopReason.MAX_CALLS: StopReason.BUDGET,
    StopReason.MAX_SECONDS: StopReason.BUDGET,
    # the model proposer's budgets: the kernel's one word for a spent budget
    StopReason.MAX_USD: StopReason.BUDGET,
    StopReason.MAX_TOKENS: StopReason.BUDGET,
    StopReason.ERROR: StopReason.ERROR,
    StopReason.ROUNDS: StopReason.MAX_GENERATIONS,
}


def run_reason(kernel_code: str | None, default: StopReason = StopReason.ROUNDS) -> StopReason:
    """The report's word for a kernel stop code (``default`` for one with no counterpart)."""
    try:
        return _KERNEL_TO_RUN.get(StopReason(kernel_code), default)
    except ValueError:
        return default


def kernel_code(run_reason: str | None) -> StopReason:
    """The kernel's code for a driver stop (``error`` for a word the kernel has no unit for)."""
    try:
        return _RUN_TO_KERNEL.get(StopReason(run_reason), StopReason.ERROR)
    except ValueError:
        return StopReason.ERROR
