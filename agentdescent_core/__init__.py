"""agentdescent_core: the evolution engine behind pytest-agentdescent.

It never imports pytest, so it can drive any evaluator; the pytest plugin in
``pytest_agentdescent`` is one client of it.
"""

from __future__ import annotations

from agentdescent_core.artifacts.diff import Diff, apply_ops
from agentdescent_core.errors import (
    AgentDescentError,
    CasConflictError,
    LedgerError,
    RefusalError,
)

__all__ = [
    "AgentDescentError",
    "CasConflictError",
    "Diff",
    "LedgerError",
    "RefusalError",
    "apply_ops",
]
