"""Every exception a caller of the engine may catch, in one module.

Why one module: a caller catching ``LeaseHeld`` or ``SandboxSetupError``
should not have to know which implementation module raises it, and the
hierarchy (everything under :class:`AgentDescentError`; ``BackendError`` for
what kept failing, ``LedgerError`` for git, ``ContractError`` for caller bugs)
is visible at a glance.  The modules that raise them import them from here, and
they stay importable from there too.  Unlike the implementation modules, this
one is public: ``__all__`` lists every exception, and the most common ones are
also at the top of ``agentdescent_core``.

Each refusal carries a stable ``category`` (the merge-outcome vocabulary the
reports count on) and a ``code`` (the precise rule that fired), so callers can
tally and branch on them without parsing messages.  Messages always name the
offending thing and say what to do about it.

This module imports only the standard library, so importing it stays cheap.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from agentdescent_core.stops import StopReason

__all__ = [
    "AgentDescentError",
    "BackendError",
    "BudgetExhausted",
    "CasConflictError",
    "ContractError",
    "DecisionLogError",
    "GitHubError",
    "LLMCacheMiss",
    "LeaseHeld",
    "LedgerError",
    "MissingExtra",
    "ModelBackendError",
    "RefUpdateFailed",
    "RefusalError",
    "RetryableStepError",
    "RunInterrupted",
    "RunRefused",
    "RunStopped",
    "RunStoreError",
    "SandboxSetupError",
    "TamperError",
    "UnknownRunError",
    "WorkspaceError",
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


class RunInterrupted(RunStopped):
    """The run must stop now but stays unfinished, so the same command resumes it.

    Like Ctrl-C: the loop kernel records no failure for it (the run keeps its
    ``running`` status and its recorded rounds), and the controller reports the
    error.  Raised when something the run needs is gone for now, such as the
    evaluation cluster of ``--evolve-executor``.
    """


class BackendError(AgentDescentError):
    """A backend (model call, agent run, evaluation) kept failing after its retries.

    Transient failures are retried with backoff and tolerated; this is raised
    only when nothing can make progress, and ``EvolutionResult.error`` names it.
    """


# --------------------------------------------------------------------------- git ledger


class RefUpdateFailed(LedgerError):
    """A ref transaction did not apply; ``kind`` says why.

    ``race``: a ref was no longer at its expected value (someone else moved it);
    ``lock``: a ``.lock`` file is held (``lock_path``); ``other``: anything else,
    with git's message.
    """

    def __init__(self, kind: str, message: str, lock_path: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.lock_path = lock_path


class TamperError(LedgerError):
    """A candidate's run changed the user's ``.git`` or the state directory; the run stops.

    ``category`` is ``tamper``; ``changes`` lists what changed (already restored).
    """

    category = "tamper"

    def __init__(self, message: str, changes: list[str]) -> None:
        super().__init__(message)
        self.changes = changes


# --------------------------------------------------------------------------- sandbox


class SandboxSetupError(BackendError):
    """The sandbox cannot run this spec here (a missing tool, an unsupported request)."""


class WorkspaceError(AgentDescentError):
    """A workspace could not be created or restored (git failed, disk trouble)."""


# --------------------------------------------------------------------------- installation


class MissingExtra(AgentDescentError, ImportError):
    """An optional dependency is not installed; the message names the ``pip install`` to run.

    Raised when a feature that lives in an extra (the ``anthropic`` or
    ``openai`` SDK, the ``docker`` SDK) is asked for without it, instead of the
    bare ModuleNotFoundError.  ``module`` is the module that could not be
    imported, ``extra`` the extra that brings it and ``pip_command`` the command
    that installs it.  An ImportError too, so code that already treats a failed
    import as "not available" keeps working.
    """

    def __init__(self, *, module: str, extra: str, what: str) -> None:
        self.module = module
        self.extra = extra
        self.what = what
        self.pip_command = f"pip install 'pytest-agentdescent[{extra}]'"
        super().__init__(
            f"{what} is not installed (the {module!r} module cannot be imported): "
            f"{self.pip_command}",
            name=module,
        )


# --------------------------------------------------------------------------- models


class ModelBackendError(BackendError):
    """A model call failed for good (after the SDK's retries, or not retryable).

    ``status`` is the last HTTP status when the endpoint answered at all.
    """

    def __init__(self, message: str, *, endpoint: str, status: int | None = None) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.status = status


class LLMCacheMiss(BackendError):
    """Replay was asked for a model request that was never recorded."""

    def __init__(self, key: str, occurrence: int, path: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.occurrence = occurrence
        self.path = path


# --------------------------------------------------------------------------- the loop


class BudgetExhausted(AgentDescentError):
    """A budget of the run (calls, USD or tokens) is spent; ``reason`` is the stop reason."""

    def __init__(self, reason: StopReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class RetryableStepError(AgentDescentError):
    """Raised by a step (or apply) for a transient failure: the generation is tried again."""


class RunStoreError(AgentDescentError):
    """The run store cannot do what was asked (unusable file, bad status, closed)."""


class UnknownRunError(RunStoreError, KeyError):
    """No run has the id asked for."""

    def __init__(self, run_id: str, path: Path) -> None:
        super().__init__(
            f"no run {run_id!r} in the run store {path}; list the runs with "
            "`agentdescent report` and pass one of their ids"
        )
        self.run_id = run_id

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


class LeaseHeld(AgentDescentError):
    """Another live holder has the lease.

    ``name``, ``holder`` and ``expires_at`` (unix seconds) say who and until
    when; the message says it too, with the expiry as an ISO time and as
    "in N s".
    """

    def __init__(self, name: str, holder: str, expires_at: float, *, now: float | None = None,
                 lost: bool = False) -> None:
        remaining = max(0, round(expires_at - (time.time() if now is None else now)))
        when = datetime.fromtimestamp(expires_at, tz=timezone.utc).isoformat(timespec="seconds")
        head = (f"the lease {name!r} was lost: it is now held by {holder!r}" if lost
                else f"the lease {name!r} is held by {holder!r}")
        super().__init__(
            f"{head} until {when} (expires in {remaining} s); wait for that worker to "
            "finish or for the lease to expire, or stop that worker — if it is known to be "
            "dead, break the lease"
        )
        self.name = name
        self.holder = holder
        self.expires_at = expires_at


class RunRefused(AgentDescentError):
    """Another live run holds the repository; the message names it and its lease expiry."""


class DecisionLogError(AgentDescentError):
    """The decision log cannot be used or was given a record it cannot store."""


# --------------------------------------------------------------------------- publishing


class GitHubError(AgentDescentError):
    """Publishing to GitHub failed; the message says what to fix.

    ``status`` is the HTTP status when the API answered (None for git and
    configuration problems).  Messages never contain the token: every one is
    built by this package and passed through
    :func:`agentdescent_core.github.errors.scrub`, and API errors are raised
    outside the ``except`` block so no HTTP exception (whose request holds the
    ``Authorization`` header) hangs off ``__context__``.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
