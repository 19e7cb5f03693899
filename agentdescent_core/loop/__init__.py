"""The drivers: ``evolve()`` (rounds with a barrier) and ``async_evolve()`` (no barrier).

Both run the same pieces — workers (:mod:`.worker`) rolling out tasks and
proposing, the verifier as the one evaluation choke point, the aggregator as
the one place merges are decided — and return the same
:class:`~agentdescent_core.loop.result.EvolutionResult`.
"""

from __future__ import annotations

from agentdescent_core.loop.async_evolve import async_evolve
from agentdescent_core.loop.budget import Budget, BudgetExhausted
from agentdescent_core.loop.evolve import evolve
from agentdescent_core.loop.parallel import (
    DataParallel,
    ParallelMode,
    PipelineParallel,
    Shard,
    TensorParallel,
)
from agentdescent_core.loop.result import EvolutionResult, RoundInfo
from agentdescent_core.loop.sampling import DifficultyWeighted, RoundRobin, TaskSampler
from agentdescent_core.loop.verified import evolve_verified
from agentdescent_core.loop.worker import ProposalSite
from agentdescent_core.stops import DRIVER_REASONS, StopReason

__all__ = [
    "DRIVER_REASONS",
    "Budget",
    "BudgetExhausted",
    "DataParallel",
    "DifficultyWeighted",
    "EvolutionResult",
    "ParallelMode",
    "PipelineParallel",
    "ProposalSite",
    "RoundInfo",
    "RoundRobin",
    "Shard",
    "StopReason",
    "TaskSampler",
    "TensorParallel",
    "async_evolve",
    "evolve",
    "evolve_verified",
]
