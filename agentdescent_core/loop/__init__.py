"""The drivers: ``evolve()`` (rounds with a barrier) and ``async_evolve()`` (no barrier).

Both run the same pieces — workers (:mod:`.worker`) rolling out tasks and
proposing, the verifier as the one evaluation choke point, the aggregator as
the one place merges are decided — and return the same
:class:`~agentdescent_core.loop.result.EvolutionResult`.

The durable side is here too: the loop kernel (:mod:`.kernel`, generations
that survive a crash), its run store (:mod:`.durable`), the session
controller (:mod:`.controller`) and what they take from
:mod:`agentdescent_core.decisions` (the decision log, the kill switches).
The names below are what this package exposes; the modules themselves are its
implementation.
"""

from __future__ import annotations

from agentdescent_core.decisions import (
    AnyKillSwitch,
    DecisionLog,
    DecisionRecord,
    EnvKillSwitch,
    FileKillSwitch,
    KillSwitch,
)
from agentdescent_core.loop.async_evolve import async_evolve
from agentdescent_core.loop.budget import Budget, BudgetExhausted
from agentdescent_core.loop.controller import (
    ControllerConfig,
    ControllerReport,
    SessionOutcome,
    SessionRecord,
    run_controller,
)
from agentdescent_core.loop.durable import (
    Lease,
    LeaseHeld,
    RunEvent,
    RunRecord,
    RunStoreError,
    SqliteRunStore,
    UnknownRunError,
)
from agentdescent_core.loop.durations import DurationEstimator, Straggler
from agentdescent_core.loop.evolve import evolve
from agentdescent_core.loop.kernel import (
    LoopConfig,
    LoopContext,
    LoopGeneration,
    LoopKernel,
    LoopObservation,
    LoopReport,
    RetryableStepError,
    load_report,
)
from agentdescent_core.loop.parallel import (
    DataParallel,
    ParallelMode,
    PipelineParallel,
    Shard,
    TensorParallel,
    WorkUnit,
)
from agentdescent_core.loop.result import EvolutionResult, RoundInfo
from agentdescent_core.loop.sampling import DifficultyWeighted, RoundRobin, TaskSampler
from agentdescent_core.loop.verified import evolve_verified
from agentdescent_core.loop.worker import ProposalSite
from agentdescent_core.stops import DRIVER_REASONS, StopReason

__all__ = [
    "DRIVER_REASONS",
    "AnyKillSwitch",
    "Budget",
    "BudgetExhausted",
    "ControllerConfig",
    "ControllerReport",
    "DataParallel",
    "DecisionLog",
    "DecisionRecord",
    "DifficultyWeighted",
    "DurationEstimator",
    "EnvKillSwitch",
    "EvolutionResult",
    "FileKillSwitch",
    "KillSwitch",
    "Lease",
    "LeaseHeld",
    "LoopConfig",
    "LoopContext",
    "LoopGeneration",
    "LoopKernel",
    "LoopObservation",
    "LoopReport",
    "ParallelMode",
    "PipelineParallel",
    "ProposalSite",
    "RetryableStepError",
    "RoundInfo",
    "RoundRobin",
    "RunEvent",
    "RunRecord",
    "RunStoreError",
    "SessionOutcome",
    "SessionRecord",
    "Shard",
    "SqliteRunStore",
    "StopReason",
    "Straggler",
    "TaskSampler",
    "TensorParallel",
    "UnknownRunError",
    "WorkUnit",
    "async_evolve",
    "evolve",
    "evolve_verified",
    "load_report",
    "run_controller",
]
