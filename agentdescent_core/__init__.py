"""agentdescent_core: the evolution engine behind pytest-agentdescent.

It never imports pytest, so it can drive any evaluator; the pytest plugin in
``pytest_agentdescent`` is one client of it.  The names below are the public
Python API: what a caller of ``evolve()`` needs, the durable loop, and the
exceptions worth catching.  Everything else is importable from its subpackage
(``agentdescent_core.loop``, ``.artifacts``, ``.aggregator``, ``.ledger``,
``.sandbox``, ``.proposers``, ``.stats``, ``.evaluation``, ``.github``), whose
``__init__`` lists what it exposes; modules inside a subpackage are its
implementation.  The names are imported on first use, so ``import
agentdescent_core`` (which every submodule import triggers) stays cheap: git,
numpy and scipy load only when a part that needs them is touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentdescent_core.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    # evolve() and what a call of it takes
    "evolve": "agentdescent_core.loop.evolve",
    "async_evolve": "agentdescent_core.loop.async_evolve",
    "Task": "agentdescent_core.tasks",
    "EvolutionResult": "agentdescent_core.loop",
    "RoundInfo": "agentdescent_core.loop",
    "AggregatorConfig": "agentdescent_core.aggregator",
    # strategies: what evolves and how a proposal becomes a Diff
    "Diff": "agentdescent_core.artifacts",
    "SingleSlot": "agentdescent_core.artifacts",
    "AppendRules": "agentdescent_core.artifacts",
    "KeyedRules": "agentdescent_core.artifacts",
    "FileTree": "agentdescent_core.artifacts",
    # parallel strategies
    "DataParallel": "agentdescent_core.loop",
    "TensorParallel": "agentdescent_core.loop",
    "PipelineParallel": "agentdescent_core.loop",
    "WorkUnit": "agentdescent_core.loop",
    # staleness policies
    "Full": "agentdescent_core.staleness",
    "Guarded": "agentdescent_core.staleness",
    "Reflective": "agentdescent_core.staleness",
    # an actor from any prompt -> text function, and models as such functions
    "LLMAgent": "agentdescent_core.proposers.agent",
    "reflector": "agentdescent_core.proposers.agent",
    "claude": "agentdescent_core.proposers.completions",
    "openai_compatible": "agentdescent_core.proposers.completions",
    # durable runs
    "LoopKernel": "agentdescent_core.loop",
    "SqliteRunStore": "agentdescent_core.loop",
    "run_controller": "agentdescent_core.loop",
    # errors
    "AgentDescentError": "agentdescent_core.errors",
    "ContractError": "agentdescent_core.errors",
    "RefusalError": "agentdescent_core.errors",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    # ``name as name``: an explicit re-export, so strict type checkers (no implicit
    # re-export) accept ``from agentdescent_core import evolve``.
    # Functions are imported from their own modules: a function named like its module
    # confuses mypy's import-cycle handling when imported through the package.
    from agentdescent_core.aggregator import AggregatorConfig as AggregatorConfig
    from agentdescent_core.artifacts import (
        AppendRules as AppendRules,
        Diff as Diff,
        FileTree as FileTree,
        KeyedRules as KeyedRules,
        SingleSlot as SingleSlot,
    )
    from agentdescent_core.errors import (
        AgentDescentError as AgentDescentError,
        ContractError as ContractError,
        RefusalError as RefusalError,
    )
    from agentdescent_core.loop import (
        DataParallel as DataParallel,
        EvolutionResult as EvolutionResult,
        LoopKernel as LoopKernel,
        PipelineParallel as PipelineParallel,
        RoundInfo as RoundInfo,
        SqliteRunStore as SqliteRunStore,
        TensorParallel as TensorParallel,
        WorkUnit as WorkUnit,
        run_controller as run_controller,
    )
    from agentdescent_core.loop.async_evolve import async_evolve as async_evolve
    from agentdescent_core.loop.evolve import evolve as evolve
    from agentdescent_core.proposers.agent import LLMAgent as LLMAgent, reflector as reflector
    from agentdescent_core.proposers.completions import (
        claude as claude,
        openai_compatible as openai_compatible,
    )
    from agentdescent_core.staleness import (
        Full as Full,
        Guarded as Guarded,
        Reflective as Reflective,
    )
    from agentdescent_core.tasks import Task as Task
