"""The git ledger: accepted versions as commits on ``<prefix>dev`` / ``<prefix>stable``.

See :mod:`.ledger` for the guarantees (the user's working tree, index, HEAD and
other refs are never touched; compare-and-swap commits), :mod:`.carry` for how
evolved files follow a moved base branch, :mod:`.message` for the evidence
trailers, :mod:`.scratch` for throwaway repositories, :mod:`.gitenv` for the
isolated git configuration.
"""

from __future__ import annotations

from agentdescent_core.ledger.branches import BranchesResult
from agentdescent_core.ledger.carry import CarryConflict, plan_carry
from agentdescent_core.ledger.gitenv import DEFAULT_IDENTITY
from agentdescent_core.ledger.ledger import (
    CommitResult,
    Ledger,
    PromoteResult,
    validate_prefix,
)
from agentdescent_core.ledger.message import Evidence, VersionRecord, parse_message
from agentdescent_core.ledger.scratch import ScratchLedger

__all__ = [
    "DEFAULT_IDENTITY",
    "BranchesResult",
    "CarryConflict",
    "CommitResult",
    "Evidence",
    "Ledger",
    "PromoteResult",
    "ScratchLedger",
    "VersionRecord",
    "parse_message",
    "plan_carry",
    "validate_prefix",
]
