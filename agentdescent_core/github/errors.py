"""The one exception of the GitHub layer.

Kept in its own module so the git side (:mod:`.remote`) and the HTTP side
(:mod:`.api`) can both raise it without importing each other.
"""

from __future__ import annotations

from agentdescent_core.errors import AgentDescentError

__all__ = ["GitHubError", "scrub"]


class GitHubError(AgentDescentError):
    """Publishing to GitHub failed; the message says what to fix.

    ``status`` is the HTTP status when the API answered (None for git and
    configuration problems).  Messages never contain the token: every one is
    built by this package and passed through :func:`scrub`, and API errors are
    raised outside the ``except`` block so no HTTP exception (whose request
    holds the ``Authorization`` header) hangs off ``__context__``.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def scrub(text: str, *secrets: str | None) -> str:
    """``text`` with every non-trivial secret replaced by ``***``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text
