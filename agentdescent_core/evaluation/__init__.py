"""Evaluation: scoring an artifact state on tasks, through one memoised choke point.

:class:`SandboxedVerifier` (a candidate scored by a child pytest in a workspace)
and :class:`EvalCache` are loaded on first use: a verifier of one's own needs
only the protocol, not git and the sandbox backends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentdescent_core.evaluation.protocol import TaskSplit, Verifier

__all__ = ["EvalCache", "SandboxedVerifier", "TaskSplit", "Verifier"]

_LAZY = {"SandboxedVerifier": "agentdescent_core.evaluation.sandboxed",
         "EvalCache": "agentdescent_core.evaluation.cache"}

if TYPE_CHECKING:
    from agentdescent_core.evaluation.cache import EvalCache as EvalCache
    from agentdescent_core.evaluation.sandboxed import SandboxedVerifier as SandboxedVerifier


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value
