"""Staleness: what to do with a proposal made against a version that is no longer the head.

A worker reads version ``v`` and proposes a diff; by the time the aggregator
looks at it, dev may be at ``v + eta``.  A stale diff is not necessarily
worthless: unlike a stale gradient it can be re-applied to the current head and
re-checked.  A policy maps ``(eta, alpha, contract_breaking)`` to one of three
actions, and it is the only thing that changes between synchronous and
asynchronous regimes; the merge pipeline stays the same.

``alpha`` (how much lag the aggregator tries to salvage) comes from the
artifact's layer as decided by :func:`agentdescent_core.governance.classify`,
the one place the L1/L2 boundary lives: hot (L1) artifacts move fast, so more
lag is expected and tolerated.  A contract-breaking diff gets ``alpha = 0``:
rebasing across a contract change costs more than proposing again.  What is
contract-breaking is the strategy's call (its optional ``breaks_contract``,
asked by the aggregator through
:func:`agentdescent_core.artifacts.strategies.contract_breaking`).
"""

from __future__ import annotations

import enum
from typing import Protocol, runtime_checkable

from agentdescent_core.governance import Layer, classify


class StalenessAction(str, enum.Enum):
    """What the aggregator does with one card."""

    ACCEPT = "accept"
    """Keep it as is (applied to the head without re-checking)."""
    REBASE = "rebase"
    """Apply it to the head and keep it only if its gain still holds there."""
    DISCARD = "discard"
    """Drop it; the worker will propose again against a fresher version."""

    def __str__(self) -> str:
        return self.value


@runtime_checkable
class StalenessPolicy(Protocol):
    """Decides the fate of a card ``eta`` versions behind the head."""

    name: str

    def decide(self, eta: int, alpha: int, contract_breaking: bool) -> StalenessAction: ...


def _check_lag(eta: int, alpha: int) -> None:
    if eta < 0 or alpha < 0:
        raise ValueError(f"staleness eta and alpha must be >= 0, got eta={eta}, alpha={alpha}")


class Full:
    """Take every card whatever its lag: the most throughput, the least safety."""

    name = "full"

    def decide(self, eta: int, alpha: int, contract_breaking: bool) -> StalenessAction:
        _check_lag(eta, alpha)
        return StalenessAction.ACCEPT

    def __repr__(self) -> str:
        return "Full()"


class Guarded:
    """Bounded staleness: fresh cards pass, up to ``alpha`` behind are rebased, older dropped."""

    name = "guarded"

    def decide(self, eta: int, alpha: int, contract_breaking: bool) -> StalenessAction:
        _check_lag(eta, alpha)
        if eta == 0:
            return StalenessAction.ACCEPT
        limit = 0 if contract_breaking else alpha
        return StalenessAction.REBASE if eta <= limit else StalenessAction.DISCARD

    def __repr__(self) -> str:
        return "Guarded()"


class Reflective:
    """Salvage every stale card by rebasing and re-verifying it, whatever its lag.

    Contract-breaking cards are the exception: they are never rebased.
    """

    name = "reflective"

    def decide(self, eta: int, alpha: int, contract_breaking: bool) -> StalenessAction:
        _check_lag(eta, alpha)
        if eta == 0:
            return StalenessAction.ACCEPT
        return StalenessAction.DISCARD if contract_breaking else StalenessAction.REBASE

    def __repr__(self) -> str:
        return "Reflective()"


STALENESS_POLICIES: dict[str, type[Full] | type[Guarded] | type[Reflective]] = {
    "full": Full,
    "guarded": Guarded,
    "reflective": Reflective,
}

DEFAULT_STALENESS_POLICY = "guarded"


def get_policy(name: str = DEFAULT_STALENESS_POLICY) -> StalenessPolicy:
    """The staleness policy called ``name`` ("full", "guarded" or "reflective")."""
    try:
        return STALENESS_POLICIES[name]()
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown staleness policy {name!r}; valid policies: "
            f"{', '.join(sorted(STALENESS_POLICIES))}"
        ) from None


def alpha_for(
    blast_radius: float, *, contract_breaking: bool, alpha_head: int = 5, alpha_tail: int = 1
) -> int:
    """Lag tolerance: ``alpha_head`` for an L1 artifact, ``alpha_tail`` for L2, 0 if breaking."""
    if contract_breaking:
        return 0
    return alpha_head if classify(blast_radius) is Layer.L1 else alpha_tail
