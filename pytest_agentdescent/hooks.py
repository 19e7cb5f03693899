"""Hook specifications of pytest-agentdescent (registered through ``pytest_addhooks``).

Implement them in a ``conftest.py`` or a plugin.  Each one says when it fires.
The objects passed to them are plain dataclasses defined here, so a hook
implementation needs nothing but this module's names to be typed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentdescent_core.memory import Attempt

__all__ = [
    "Attempt",
    "Failure",
    "ProposeContext",
    "RoundSummary",
    "pytest_evolve_propose",
    "pytest_evolve_report",
    "pytest_evolve_round",
]


@dataclass(frozen=True)
class Failure:
    """A failing *train* task as the proposer sees it (holdout tasks never appear).

    ``message`` is pytest's rewritten assertion message (or the error);
    ``output`` the captured stdout / stderr / log, truncated; ``source`` the
    test function's source code — what "right" looks like.
    """

    nodeid: str
    outcome: str
    reward: float
    message: str
    output: str
    source: str


@dataclass(frozen=True)
class ProposeContext:
    """Everything a proposer may read to suggest an edit of the artifact.

    ``files`` is the current artifact state ``{repo-relative posix path: text}``;
    ``roots`` the artifact roots; ``failures`` the failing train tasks; ``round``,
    ``worker`` and ``version`` say where in the run this proposal is made, and
    ``rng`` is a ``random.Random`` seeded from ``--evolve-seed``, the round and
    the worker, so a proposer that draws from it is reproducible.

    ``history`` is what was already tried for these failing tests, in this run
    and in earlier runs and scheduled sessions: one :class:`Attempt` per
    distinct edit (oldest first) with its verdict — ``category`` (such as
    ``below-threshold``, ``guard-failed`` or ``committed``), ``reason``, the
    evidence and the train tests it flipped.  Held-out tests never appear in it.
    """

    files: Mapping[str, str]
    roots: tuple[str, ...]
    failures: tuple[Failure, ...]
    round: int
    worker: str
    version: int
    rng: random.Random = field(compare=False, repr=False)
    history: tuple[Attempt, ...] = ()


@dataclass(frozen=True)
class RoundSummary:
    """What one round did: passed to ``pytest_evolve_round``.

    ``reward`` is the dev head's reward after the round; ``accepted`` whether a
    candidate was committed in it; ``outcomes`` counts the merge decisions of
    the round by category (``committed``, ``below-threshold``,
    ``frozen-violation``, ...).
    """

    round: int
    version: int
    reward: float | None
    accepted: bool
    outcomes: Mapping[str, int]
    calls: int = 0
    seconds: float = 0.0


@pytest.hookspec(firstresult=True)
def pytest_evolve_propose(context: ProposeContext) -> Mapping[str, str | None] | None:
    """Propose an edit of the artifact; fires once per worker per round.

    Called when a worker has found failing train tasks on the version it reads.
    Return ``{repo-relative path: new text}`` (``None`` as the text deletes the
    file), or None to make no proposal and let the next implementation answer
    (the first non-None answer wins; the model proposer is registered last).
    Paths must lie inside the artifact roots and must not be test modules,
    ``conftest.py`` or config files: such edits are refused and counted.
    """


@pytest.hookspec
def pytest_evolve_round(info: RoundSummary) -> Any:
    """After every round of ``pytest --evolve``, once its merges are decided."""


@pytest.hookspec
def pytest_evolve_report(report: Mapping[str, Any]) -> Any:
    """Once at the end of ``pytest --evolve``, with the content of ``report.json``.

    Fires after the report files are written, whether the run completed or
    ended on an error (then ``report["error"]`` says why).
    """
