"""Which sandbox backends the tests may use on this machine.

Locally a missing backend (no ``bwrap``, no docker daemon) skips the tests that
need it, with the reason.  Under CI (``CI=true``) the same absence fails them:
CI installs every backend, so a pass there must never come from skipping.
"""

from __future__ import annotations

import os

import pytest

from agentdescent_core.sandbox.spec import Backend
from pytest_agentdescent.sandboxing import plugin_args

ISOLATING_BACKENDS = ("bwrap", "docker")
ALL_BACKENDS = ("local", *ISOLATING_BACKENDS)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def require_backend(name: str) -> Backend:
    """The named backend, or skip (locally) / fail (under CI) saying why it is missing."""
    from agentdescent_core.sandbox.select import get_backend

    backend = get_backend(name)
    reason = backend.unavailable_reason()
    if reason is not None:
        message = f"sandbox backend {name!r} is not usable here: {reason}"
        if in_ci():
            pytest.fail(message + " (CI=true: CI must install every backend)", pytrace=False)
        pytest.skip(message)
    return backend


def child_pytest_args() -> tuple[str, ...]:
    """The ``-p`` options of ``PYTEST_ADDOPTS``, for a verifier a test builds itself.

    ``pytest --evolve`` passes them to its children; a test that constructs a
    SandboxedVerifier directly passes these, so its children leave out the same
    unused plugins of this environment as every other pytest the tests start
    (``tests/conftest.py``: hypothesis alone is most of a child's start).
    """
    return plugin_args((), os.environ)
