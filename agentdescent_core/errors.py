"""Exceptions shared by every part of the engine.

Each refusal carries a stable ``category`` (the merge-outcome vocabulary the
reports count on) and a ``code`` (the precise rule that fired), so callers can
tally and branch on them without parsing messages.  Messages always name the
offending thing and say what to do about it.
"""

from __future__ import annotations

__all__ = [
    "AgentDescentError",
    "BackendError",
    "CasConflictError",
    "ContractError",
    "LedgerError",
    "RefusalError",
    "RunStopped",
]


class AgentDescentError(Exception):
    """Base class of every error this package raises on purpose."""


class RefusalError(AgentDescentError):
    """A proposed change (or an artifact on disk) breaks one of the rules.

    ``category`` is one of the stable merge categories (``invalid-proposal``,
    ``frozen-violation``, ``oversized``, ``unknown-artifact``, ...); ``code`` names
    the specific rule (``absolute-path``, ``symlink``, ``too-many-files``, ...);
    ``path`` is the repo-relative path concerned, when there is one.
    """

    def __init__(self, category: str, code: str, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.category = category
        self.code = code
        self.path = path

    @property
    def message(self) -> str:
        return str(self.args[0])


class LedgerError(AgentDescentError):
    """The git ledger cannot do what was asked (no repository, a held lock, ...)."""


class CasConflictError(LedgerError):
    """A compare-and-swap on a ledger branch kept losing races and gave up.

    ``category`` is always ``cas-conflict`` so the aggregator can count it like
    any other merge outcome.
    """

    category = "cas-conflict"


class ContractError(AgentDescentError, TypeError):
    """The caller's code broke the engine's contract (a bug to fix, never retried).

    Raised for a reward that is not a finite number in [0, 1], an actor whose
    signature cannot take the engine's arguments, a strategy/parallel mode pair
    that cannot work, and the like.  The message names the callable and the fix.
    """


class RunStopped(ContractError):
    """The run must end now, with this reason; never retried and never swallowed.

    A ContractError, so neither the engine's retries nor a worker's error
    tolerance apply.  ``kind`` is how a report's ``error`` names the reason
    (``Guardrails``, ``LLMCacheMiss``, ``BackendError``).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind

    @property
    def error(self) -> str:
        return f"{self.kind}: {self}"


class BackendError(AgentDescentError):
    """A backend (model call, agent run, evaluation) kept failing after its retries.

    Transient failures are retried with backoff and tolerated; this is raised
    only when nothing can make progress, and ``EvolutionResult.error`` names it.
    """
