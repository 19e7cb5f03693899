"""Sandboxes: private workspaces and the backends that run a candidate's tests in them.

``get_backend(name)`` picks a backend (``auto``, ``docker``, ``bwrap``,
``local``) and ``describe_backend`` says in one line what it isolates.
:class:`Workspace` (a private copy of the repository) is loaded on first use:
it needs GitPython, and light users such as the SQLite files' journal
(:mod:`.journal`) import this package too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentdescent_core.sandbox.select import AUTO_ORDER, describe_backend, get_backend
from agentdescent_core.sandbox.spec import (
    BACKEND_NAMES,
    NETWORK_MODES,
    Backend,
    Limits,
    RunResult,
    RunSpec,
)

__all__ = [
    "AUTO_ORDER",
    "BACKEND_NAMES",
    "NETWORK_MODES",
    "Backend",
    "Limits",
    "RunResult",
    "RunSpec",
    "Workspace",
    "describe_backend",
    "get_backend",
]

if TYPE_CHECKING:
    from agentdescent_core.sandbox.workspace import Workspace as Workspace


def __getattr__(name: str) -> Any:
    if name == "Workspace":
        from agentdescent_core.sandbox.workspace import Workspace

        globals()[name] = Workspace  # later look-ups skip this function
        return Workspace
    raise AttributeError(f"module 'agentdescent_core.sandbox' has no attribute {name!r}")
