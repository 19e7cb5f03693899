"""The example's conftest: makes ``agent`` importable, and is the proposer.

``pytest_evolve_propose`` is all ``pytest --evolve skills/`` needs to run
without a model: ``coach.propose`` reads pytest's assertion messages and the
bot's printed trace of each failing task and turns them into edits of the
skill files (see coach.py for the rules it learns).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from pytest_agentdescent.hooks import ProposeContext

sys.path.insert(0, str(Path(__file__).parent))

from coach import propose  # the example's own module: importable from here on


# optionalhook: the suite still runs with the plugin off (``pytest -p no:agentdescent``)
@pytest.hookimpl(optionalhook=True)
def pytest_evolve_propose(context: ProposeContext) -> Mapping[str, str | None] | None:
    return propose(context.files, context.failures)
