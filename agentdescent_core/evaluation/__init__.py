"""Evaluation: scoring an artifact state on tasks, through one memoised choke point.

Every name loads on first use (:mod:`agentdescent_core.lazy`): the child runs
import ``evaluation.journal`` before any test and need neither the protocol nor
:class:`SandboxedVerifier` (git, the sandbox backends) nor :class:`EvalCache`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentdescent_core.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "TaskSplit": "agentdescent_core.evaluation.protocol",
    "Verifier": "agentdescent_core.evaluation.protocol",
    "SandboxedVerifier": "agentdescent_core.evaluation.sandboxed",
    "EvalCache": "agentdescent_core.evaluation.cache",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from agentdescent_core.evaluation.cache import EvalCache as EvalCache
    from agentdescent_core.evaluation.protocol import TaskSplit as TaskSplit, Verifier as Verifier
    from agentdescent_core.evaluation.sandboxed import SandboxedVerifier as SandboxedVerifier
