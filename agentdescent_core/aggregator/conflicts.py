"""Conflict resolution: collapse duplicates, then project out contradictions by score.

Key overlap alone is not a conflict.  Two cards proposing identical ops are one
proposal backed twice; two edits of one text file whose hunks do not overlap
combine (:func:`.candidates.combine_ops`).  Only a pair that cannot both hold
is a contradiction, and then the better of the two on the union of their
tasks stays (ties keep the one backed by more cards, then the earlier one).
This repeats until no surviving pair contradicts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from agentdescent_core.aggregator.candidates import Candidate, combine_ops

Score = Callable[[Candidate, tuple[str, ...]], float]
"""(candidate, tasks) -> the candidate's reward on those tasks."""


@dataclass(frozen=True)
class Dropped:
    """A candidate that lost a contradiction, with the scores that decided it."""

    loser: Candidate
    winner: Candidate
    loser_score: float
    winner_score: float
    tasks: tuple[str, ...]

    def describe(self) -> str:
        return (
            f"{self.loser.label} contradicts {self.winner.label}: kept the latter, "
            f"{self.winner_score:.3f} vs {self.loser_score:.3f} on {len(self.tasks)} shared tasks"
        )


def dedupe(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Merge candidates with identical ops into one, keeping every backing card."""
    by_key: dict[str, Candidate] = {}
    for cand in candidates:
        seen = by_key.get(cand.key)
        if seen is None:
            by_key[cand.key] = cand
        else:
            by_key[cand.key] = Candidate(seen.cards + cand.cards, seen.ops, seen.fused)
    return list(by_key.values())


def _contradict(head: Mapping[str, str], a: Candidate, b: Candidate, textual: bool) -> bool:
    if not set(a.ops) & set(b.ops):
        return False
    return combine_ops(head, a.ops, b.ops, textual=textual) is None


def resolve_conflicts(
    candidates: Sequence[Candidate],
    head: Mapping[str, str],
    *,
    textual: bool,
    score: Score,
    fallback_tasks: tuple[str, ...],
) -> tuple[list[Candidate], list[Dropped]]:
    """Survivors (in input order) and the candidates dropped, each with its deciding scores."""
    alive = list(candidates)
    dropped: list[Dropped] = []
    while True:
        pair = next(
            ((i, j) for i in range(len(alive)) for j in range(i + 1, len(alive))
             if _contradict(head, alive[i], alive[j], textual)),
            None,
        )
        if pair is None:
            return alive, dropped
        first, second = alive[pair[0]], alive[pair[1]]
        tasks = tuple(dict.fromkeys((*first.tasks, *second.tasks))) or fallback_tasks
        s_first = score(first, tasks)
        s_second = score(second, tasks)
        rank_first = (s_first, len(first.cards), 1)
        rank_second = (s_second, len(second.cards), 0)
        if rank_first >= rank_second:
            winner, loser, w_score, l_score = first, second, s_first, s_second
        else:
            winner, loser, w_score, l_score = second, first, s_second, s_first
        alive.remove(loser)
        dropped.append(Dropped(loser, winner, l_score, w_score, tasks))
