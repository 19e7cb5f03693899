"""agentdescent_core: the evolution engine behind pytest-agentdescent.

It never imports pytest, so it can drive any evaluator; the pytest plugin in
``pytest_agentdescent`` is one client of it.  The names below are the public
Python API.  They are imported on first use, so ``import agentdescent_core``
(which every submodule import triggers) stays cheap: git, numpy and scipy load
only when a part that needs them is touched.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    # artifacts
    "Diff": "agentdescent_core.artifacts",
    "apply_ops": "agentdescent_core.artifacts",
    "Strategy": "agentdescent_core.artifacts",
    "SingleSlot": "agentdescent_core.artifacts",
    "AppendRules": "agentdescent_core.artifacts",
    "KeyedRules": "agentdescent_core.artifacts",
    "FileTree": "agentdescent_core.artifacts",
    "FileTreeLimits": "agentdescent_core.artifacts",
    "TrustRegion": "agentdescent_core.artifacts",
    "state_hash": "agentdescent_core.artifacts",
    # governance
    "FAST_MAX": "agentdescent_core.governance",
    "Layer": "agentdescent_core.governance",
    "FrozenSet": "agentdescent_core.governance",
    "classify": "agentdescent_core.governance",
    # errors
    "AgentDescentError": "agentdescent_core.errors",
    "BackendError": "agentdescent_core.errors",
    "CasConflictError": "agentdescent_core.errors",
    "ContractError": "agentdescent_core.errors",
    "LedgerError": "agentdescent_core.errors",
    "RefusalError": "agentdescent_core.errors",
    # ledger
    "Ledger": "agentdescent_core.ledger",
    "Evidence": "agentdescent_core.ledger",
    # statistics
    "TaskSamples": "agentdescent_core.stats",
    "AcceptanceDecision": "agentdescent_core.stats",
    "get_acceptance_policy": "agentdescent_core.stats",
    # engine
    "Task": "agentdescent_core.tasks",
    "EvidenceCard": "agentdescent_core.evidence",
    "MergeOutcome": "agentdescent_core.evidence",
    "MergeReport": "agentdescent_core.evidence",
    "MERGE_CATEGORIES": "agentdescent_core.evidence",
    "TaskSplit": "agentdescent_core.evaluation",
    "Verifier": "agentdescent_core.evaluation",
    "CallableVerifier": "agentdescent_core.evaluation.callable",
    "StalenessPolicy": "agentdescent_core.staleness",
    "Full": "agentdescent_core.staleness",
    "Guarded": "agentdescent_core.staleness",
    "Reflective": "agentdescent_core.staleness",
    "get_policy": "agentdescent_core.staleness",
    "Aggregator": "agentdescent_core.aggregator",
    "AggregatorConfig": "agentdescent_core.aggregator",
    "AggregatorProtocol": "agentdescent_core.aggregator",
    "ArtifactStore": "agentdescent_core.aggregator",
    "AuditScheduler": "agentdescent_core.aggregator",
    "evolve": "agentdescent_core.loop",
    "async_evolve": "agentdescent_core.loop",
    "evolve_verified": "agentdescent_core.loop",
    "ProposalSite": "agentdescent_core.loop",
    "EvolutionResult": "agentdescent_core.loop",
    "RoundInfo": "agentdescent_core.loop",
    "DataParallel": "agentdescent_core.loop",
    "TensorParallel": "agentdescent_core.loop",
    "PipelineParallel": "agentdescent_core.loop",
    "RoundRobin": "agentdescent_core.loop",
    "DifficultyWeighted": "agentdescent_core.loop",
    "Completion": "agentdescent_core.agents",
    "LLMAgent": "agentdescent_core.agents",
    "from_callable": "agentdescent_core.agents",
    "reflector": "agentdescent_core.agents",
    # sandboxed evaluation
    "SandboxedVerifier": "agentdescent_core.evaluation.sandboxed",
    "EvalCache": "agentdescent_core.evaluation.cache",
    "TestRecord": "agentdescent_core.evaluation.records",
    "Workspace": "agentdescent_core.sandbox.workspace",
    "Limits": "agentdescent_core.sandbox.spec",
    "get_backend": "agentdescent_core.sandbox.select",
    # durable runs
    "SqliteRunStore": "agentdescent_core.loop.durable",
    "Lease": "agentdescent_core.loop.durable",
    "LeaseHeld": "agentdescent_core.loop.durable",
    "RunRecord": "agentdescent_core.loop.durable",
    "RunEvent": "agentdescent_core.loop.durable",
    "LoopKernel": "agentdescent_core.loop.kernel",
    "LoopConfig": "agentdescent_core.loop.kernel",
    "LoopContext": "agentdescent_core.loop.kernel",
    "LoopObservation": "agentdescent_core.loop.kernel",
    "LoopGeneration": "agentdescent_core.loop.kernel",
    "LoopReport": "agentdescent_core.loop.kernel",
    "RetryableStepError": "agentdescent_core.loop.kernel",
    "load_report": "agentdescent_core.loop.kernel",
    "run_controller": "agentdescent_core.loop.controller",
    "ControllerConfig": "agentdescent_core.loop.controller",
    "ControllerReport": "agentdescent_core.loop.controller",
    "SessionOutcome": "agentdescent_core.loop.controller",
    "SessionRecord": "agentdescent_core.loop.controller",
    "KillSwitch": "agentdescent_core.decisions",
    "FileKillSwitch": "agentdescent_core.decisions",
    "EnvKillSwitch": "agentdescent_core.decisions",
    "AnyKillSwitch": "agentdescent_core.decisions",
    "DecisionRecord": "agentdescent_core.decisions",
    "DecisionLog": "agentdescent_core.decisions",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentdescent_core' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from agentdescent_core.agents import Completion, LLMAgent, from_callable, reflector
    from agentdescent_core.aggregator import (
        Aggregator,
        AggregatorConfig,
        AggregatorProtocol,
        ArtifactStore,
        AuditScheduler,
    )
    from agentdescent_core.artifacts import (
        AppendRules,
        Diff,
        FileTree,
        FileTreeLimits,
        KeyedRules,
        SingleSlot,
        Strategy,
        TrustRegion,
        apply_ops,
        state_hash,
    )
    from agentdescent_core.decisions import (
        AnyKillSwitch,
        DecisionLog,
        DecisionRecord,
        EnvKillSwitch,
        FileKillSwitch,
        KillSwitch,
    )
    from agentdescent_core.errors import (
        AgentDescentError,
        BackendError,
        CasConflictError,
        ContractError,
        LedgerError,
        RefusalError,
    )
    from agentdescent_core.evaluation import TaskSplit, Verifier
    from agentdescent_core.evaluation.cache import EvalCache
    from agentdescent_core.evaluation.callable import CallableVerifier
    from agentdescent_core.evaluation.records import TestRecord
    from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
    from agentdescent_core.evidence import (
        MERGE_CATEGORIES,
        EvidenceCard,
        MergeOutcome,
        MergeReport,
    )
    from agentdescent_core.governance import FAST_MAX, FrozenSet, Layer, classify
    from agentdescent_core.ledger import Evidence, Ledger
    from agentdescent_core.loop import (
        DataParallel,
        DifficultyWeighted,
        EvolutionResult,
        PipelineParallel,
        ProposalSite,
        RoundInfo,
        RoundRobin,
        TensorParallel,
        async_evolve,
        evolve,
        evolve_verified,
    )
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
        SqliteRunStore,
    )
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
    from agentdescent_core.sandbox.select import get_backend
    from agentdescent_core.sandbox.spec import Limits
    from agentdescent_core.sandbox.workspace import Workspace
    from agentdescent_core.staleness import Full, Guarded, Reflective, StalenessPolicy, get_policy
    from agentdescent_core.stats import AcceptanceDecision, TaskSamples, get_acceptance_policy
    from agentdescent_core.tasks import Task
