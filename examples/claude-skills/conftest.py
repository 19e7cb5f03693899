"""The example's conftest: makes ``agent`` importable and gives the tests a Claude client.

Tests that need the model take the ``claude`` fixture.  Without
``ANTHROPIC_API_KEY`` they are skipped with a message saying what to set; the
routing tests and the guard need no key.  There is no ``pytest_evolve_propose``
hook here: the proposer is the model given with ``--evolve-model``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anthropic
import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def claude() -> anthropic.Anthropic:
    """An Anthropic client; ANTHROPIC_BASE_URL points it at another server when set."""
    if not os.environ.get("ANTHROPIC_API_KEY"):
        pytest.skip("set ANTHROPIC_API_KEY to run the skill tests against Claude "
                    "(and ANTHROPIC_BASE_URL for a compatible server)")
    return anthropic.Anthropic(timeout=60.0, max_retries=3)
