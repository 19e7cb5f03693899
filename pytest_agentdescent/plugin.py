"""The pytest plugin entry point (``pytest11: agentdescent``).

So far it only registers the markers, so a suite can start marking its tasks
today; ``--evolve`` and the rest of the options arrive with the plugin issue.
Heavy imports (git, numpy, the SDKs) stay out of this module: it is imported by
every pytest run in an environment where the package is installed.
"""

from __future__ import annotations

import pytest

from pytest_agentdescent.reward import evolve_reward  # noqa: F401  (the fixture, registered here)

EVOLVE_MARKER = (
    "evolve(weight=1.0, holdout=None): this test is an agentdescent task; "
    "its pass/fail (or evolve_reward value) is the reward."
)
GUARD_MARKER = (
    "evolve_guard: this test must keep passing for an evolved candidate to be accepted."
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", EVOLVE_MARKER)
    config.addinivalue_line("markers", GUARD_MARKER)
