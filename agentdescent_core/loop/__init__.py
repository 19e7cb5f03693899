"""The drivers: ``evolve()`` (rounds with a barrier) and ``async_evolve()`` (no barrier).

Both run the same pieces — workers (:mod:`.worker`) rolling out tasks and
proposing, the verifier as the one evaluation choke point, the aggregator as
the one place merges are decided — and return the same
:class:`~agentdescent_core.loop.result.EvolutionResult`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Loaded on first use: ``agentdescent report`` reads the run store
# (loop/durable.py) without paying for the whole engine.
_EXPORTS: dict[str, str] = {
    "async_evolve": "agentdescent_core.loop.async_evolve",
    "Budget": "agentdescent_core.loop.budget",
    "BudgetExhausted": "agentdescent_core.loop.budget",
    "evolve": "agentdescent_core.loop.evolve",
    "DataParallel": "agentdescent_core.loop.parallel",
    "ParallelMode": "agentdescent_core.loop.parallel",
    "PipelineParallel": "agentdescent_core.loop.parallel",
    "Shard": "agentdescent_core.loop.parallel",
    "TensorParallel": "agentdescent_core.loop.parallel",
    "STOP_REASONS": "agentdescent_core.loop.result",
    "EvolutionResult": "agentdescent_core.loop.result",
    "RoundInfo": "agentdescent_core.loop.result",
    "DifficultyWeighted": "agentdescent_core.loop.sampling",
    "RoundRobin": "agentdescent_core.loop.sampling",
    "TaskSampler": "agentdescent_core.loop.sampling",
    "evolve_verified": "agentdescent_core.loop.verified",
    "ProposalSite": "agentdescent_core.loop.worker",
}

__all__ = [
    "STOP_REASONS",
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
    "TaskSampler",
    "TensorParallel",
    "async_evolve",
    "evolve",
    "evolve_verified",
]


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:
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
    from agentdescent_core.loop.result import STOP_REASONS, EvolutionResult, RoundInfo
    from agentdescent_core.loop.sampling import DifficultyWeighted, RoundRobin, TaskSampler
    from agentdescent_core.loop.verified import evolve_verified
    from agentdescent_core.loop.worker import ProposalSite
