"""Sandboxes: private workspaces and the backends that run a candidate's tests in them.

``get_backend(name)`` picks a backend (``auto``, ``docker``, ``bwrap``,
``local``) and ``describe_backend`` says in one line what it isolates.
Every name loads on first use (:mod:`agentdescent_core.lazy`): the plugin
imports ``sandbox.spec`` and ``sandbox.env`` in every pytest process, and
:class:`Workspace` (a private copy of the repository) needs GitPython.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentdescent_core.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "AUTO_ORDER": "agentdescent_core.sandbox.select",
    "describe_backend": "agentdescent_core.sandbox.select",
    "get_backend": "agentdescent_core.sandbox.select",
    "BACKEND_NAMES": "agentdescent_core.sandbox.spec",
    "NETWORK_MODES": "agentdescent_core.sandbox.spec",
    "Backend": "agentdescent_core.sandbox.spec",
    "Limits": "agentdescent_core.sandbox.spec",
    "RunResult": "agentdescent_core.sandbox.spec",
    "RunSpec": "agentdescent_core.sandbox.spec",
    "Workspace": "agentdescent_core.sandbox.workspace",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from agentdescent_core.sandbox.select import (
        AUTO_ORDER as AUTO_ORDER,
        describe_backend as describe_backend,
        get_backend as get_backend,
    )
    from agentdescent_core.sandbox.spec import (
        BACKEND_NAMES as BACKEND_NAMES,
        NETWORK_MODES as NETWORK_MODES,
        Backend as Backend,
        Limits as Limits,
        RunResult as RunResult,
        RunSpec as RunSpec,
    )
    from agentdescent_core.sandbox.workspace import Workspace as Workspace
