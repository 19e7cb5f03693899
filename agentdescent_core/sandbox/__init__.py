"""Sandboxes: private workspaces and the backends that run a candidate's tests in them."""

from __future__ import annotations

from agentdescent_core.sandbox.spec import (
    BACKEND_NAMES,
    NETWORK_MODES,
    Backend,
    Limits,
    RunResult,
    RunSpec,
)

__all__ = ["BACKEND_NAMES", "NETWORK_MODES", "Backend", "Limits", "RunResult", "RunSpec"]
