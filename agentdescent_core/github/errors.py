"""The GitHub layer's exception and the scrubbing of secrets out of its messages.

:class:`GitHubError` is defined in :mod:`agentdescent_core.errors` with the
engine's other exceptions and imported here, so the git side (:mod:`.remote`)
and the HTTP side (:mod:`.api`) can both raise it without importing each other.
"""

from __future__ import annotations

from agentdescent_core.errors import GitHubError as GitHubError


def scrub(text: str, *secrets: str | None) -> str:
    """``text`` with every non-trivial secret replaced by ``***``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text
