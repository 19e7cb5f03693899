"""The ``evolve`` and ``evolve_guard`` markers: their declaration and their one reading.

A marked test is a task; its marker says how much it weighs in the reward and
whether it is held out from the proposer.  :func:`read_marker` is the only
place those arguments are interpreted, so a plain run's summary line and the
``--evolve`` controller always agree, and a bad argument is one clear
``pytest.UsageError`` at collection naming the test.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

EVOLVE = "evolve"
GUARD = "evolve_guard"

EVOLVE_MARKER = (
    "evolve(weight=1.0, holdout=None): this test is an agentdescent task; "
    "its pass/fail (or evolve_reward value) is the reward."
)
GUARD_MARKER = (
    "evolve_guard: this test must keep passing for an evolved candidate to be accepted."
)


@dataclass(frozen=True)
class TaskMarker:
    """The arguments of one test's ``evolve`` marker.

    ``holdout`` None means "decided by the run" (a stable hash of the node id
    against ``evolve_holdout``); True / False force the test into the holdout
    or the train split.
    """

    weight: float = 1.0
    holdout: bool | None = None


def _bad(item: pytest.Item, what: str) -> pytest.UsageError:
    return pytest.UsageError(
        f"{item.nodeid}: @pytest.mark.evolve {what}; "
        "write @pytest.mark.evolve(weight=1.0, holdout=None) with a positive weight "
        "and holdout True, False or None"
    )


def _arguments(item: pytest.Item, marker: pytest.Mark) -> dict[str, object]:
    """The arguments one ``evolve`` mark gives, by name (positional ones mapped)."""
    if len(marker.args) > 2:
        raise _bad(item, f"takes at most 2 positional arguments, got {len(marker.args)}")
    unknown = sorted(set(marker.kwargs) - {"weight", "holdout"})
    if unknown:
        raise _bad(item, f"got unknown argument(s) {', '.join(unknown)}")
    given = {key: value for key, value in zip(("weight", "holdout"), marker.args, strict=False)}
    for key in given:
        if key in marker.kwargs:
            raise _bad(item, f"got {key} both by position and by name")
    given.update(marker.kwargs)
    return given


def _closest_first(item: pytest.Item) -> list[pytest.Mark]:
    """The item's ``evolve`` marks, the most specific first.

    A parametrized case's own mark (``pytest.param(..., marks=...)``) is stored
    after the function's decorator mark, yet it is the more specific one: it
    comes first here, then the function's, then class and module marks.
    """
    own = [mark for mark in item.own_markers if mark.name == EVOLVE]
    inherited = [mark for mark in item.iter_markers(EVOLVE) if mark not in own]
    return [*reversed(own), *inherited]


def read_marker(item: pytest.Item) -> TaskMarker | None:
    """The item's ``evolve`` arguments, or None when the test is not a task.

    Each argument comes from the most specific mark that gives it, so
    ``pytest.param(..., marks=pytest.mark.evolve(holdout=True))`` on one case
    overrides the function's ``@pytest.mark.evolve(weight=2)`` for that case
    only, and keeps its weight.  Positional arguments follow the signature
    ``evolve(weight, holdout)``.  Raises ``pytest.UsageError`` naming the test
    for an unknown argument, a weight that is not a positive finite number, or
    a holdout that is not True / False / None.
    """
    marks = _closest_first(item)
    if not marks:
        return None
    given: dict[str, object] = {}
    for mark in reversed(marks):  # least specific first; closer marks overwrite
        given.update(_arguments(item, mark))
    weight = given.get("weight", 1.0)
    holdout = given.get("holdout")
    if (isinstance(weight, bool) or not isinstance(weight, (int, float))
            or not math.isfinite(weight) or weight <= 0):
        raise _bad(item, f"weight must be a positive number, got {weight!r}")
    if holdout is not None and not isinstance(holdout, bool):
        raise _bad(item, f"holdout must be True, False or None, got {holdout!r}")
    return TaskMarker(weight=float(weight), holdout=holdout)


def is_guard(item: pytest.Item) -> bool:
    """Is the item marked ``evolve_guard`` (a test every accepted candidate must pass)?"""
    return item.get_closest_marker(GUARD) is not None


def validate_markers(items: Iterable[pytest.Item]) -> None:
    """Read every item's marker once, so a bad one stops the run at collection.

    Every bad marker is listed in the one ``pytest.UsageError``, not only the first.
    """
    problems: list[str] = []
    for item in items:
        try:
            read_marker(item)
        except pytest.UsageError as exc:
            problems.append(str(exc))
    if problems:
        raise pytest.UsageError("\n".join(problems))


# ---------------------------------------------------------------- tasks chosen from outside

def task_expression(text: str) -> Any:
    """``text`` compiled as a ``-k`` expression; ValueError (with pytest's reason) if bad.

    ``evolve_tasks`` selects tasks without editing the tests, the way ``-k``
    selects tests: words match test, class, module and marker names
    (substrings, case-insensitive), combined with ``and`` / ``or`` / ``not``.
    pytest's own expression language is used so the two can never disagree.
    """
    from _pytest.mark.expression import Expression

    try:
        return Expression.compile(text)
    except Exception as exc:  # pytest's ParseError, which it does not export
        raise ValueError(str(exc)) from None


def mark_selected_tasks(items: Sequence[pytest.Item], text: str) -> int:
    """Give every item that ``text`` selects an ``evolve`` mark it does not already carry.

    Runs at collection, before markers are read, so everything downstream (the
    plain run's summary line, the controller's tasks, the proposer's sources)
    sees one kind of task whether it was marked in the test file or chosen by
    the expression.  A test's own ``evolve(...)`` mark keeps its arguments.
    Returns how many items were added.
    """
    from _pytest.mark import KeywordMatcher

    expression = task_expression(text)
    added = 0
    for item in items:
        if item.get_closest_marker(EVOLVE) is not None:
            continue
        if expression.evaluate(KeywordMatcher.from_item(item)):
            item.add_marker(pytest.mark.evolve)
            added += 1
    return added
