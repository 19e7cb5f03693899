"""What read-based selection did in a run, for the round lines and ``report.json``.

The verifier logs one :class:`~agentdescent_core.evaluation.selection.Selection`
per acceptance test (which tasks it paired, and why each one).  This module
numbers them by round as the rounds end, words the round line's "ran 6 of 60
tests (reads)" and builds the report's ``selection`` block, so that a reviewer
can see per candidate what ran and why, and how many runs selection saved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentdescent_core.evaluation.selection import Selection, SelectionBook

#: Candidates listed one by one in the report; the rest are only counted.
SHOWN_CANDIDATES = 200


class SelectionLog:
    """The run's selections, each with the round it happened in."""

    def __init__(self, book: SelectionBook) -> None:
        self._book = book
        self._rounds: list[tuple[int, Selection]] = []

    def close_round(self, round: int) -> str | None:
        """Take the selections made since the last round; the round line's words, if any."""
        new = self._book.selections[len(self._rounds):]
        self._rounds.extend((round, selection) for selection in new)
        for selection in new:
            self._book.freeze(selection.candidate)
        if not new:
            return None
        ran = {task for selection in new for task in selection.selected}
        total = len({task for selection in new for task in selection.tests})
        return f"ran {len(ran)} of {total} tests ({self._book.mode})"

    def report(self, tests: int) -> dict[str, Any]:
        """The ``selection`` block of ``report.json`` (documented in docs/configuration.md)."""
        self.close_round(0)  # selections after the last round (promotion) count as round 0
        book = self._book
        per_candidate = []
        runs_of: dict[str, int] = {}  # a state judged twice (a fused union re-tested) counts once
        for round, selection in self._rounds:
            runs = runs_of[selection.candidate] = book.freeze(selection.candidate)
            per_candidate.append({
                "round": round,
                "candidate": selection.candidate[:12],
                "touched": list(selection.touched),
                "selected": list(selection.selected),
                "why": dict(selection.why),
                "runs": runs,
            })
        return {
            "mode": book.mode,
            "tests": tests,
            "candidates": len(per_candidate),
            "candidate_runs": sum(runs_of.values()),
            "confirm_runs": book.confirm_runs,
            "per_candidate": per_candidate[:SHOWN_CANDIDATES],
            "misses": [miss["test"] for miss in book.misses],
            "miss_details": list(book.misses),
        }
