"""Fusion: union complementary candidates, then let the union compete with its parts.

Like averaging fine-tuned models, fusing diffs that fixed different failures
often keeps both gains, but not always (two rules can interfere), so the
union is only one entrant of a tournament scored on the eval tasks; the best
entrant goes on to the audit and the acceptance test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from agentdescent_core.aggregator.candidates import Candidate, combine_ops


def fuse(candidates: Sequence[Candidate], head: Mapping[str, str], *, textual: bool
         ) -> Candidate | None:
    """The union of all candidates (None with fewer than two, or when nothing combines).

    Candidates are folded in order; one that no longer combines with the
    running union (possible after pairwise-clean text merges) is left out.
    """
    if len(candidates) < 2:
        return None
    ops = dict(candidates[0].ops)
    cards = list(candidates[0].cards)
    parts = 1
    for cand in candidates[1:]:
        combined = combine_ops(head, ops, cand.ops, textual=textual)
        if combined is None:
            continue
        ops, parts = combined, parts + 1
        cards.extend(cand.cards)
    if parts < 2:
        return None
    return Candidate(tuple(cards), ops, fused=True)


def tournament(
    entrants: Sequence[Candidate], score: Callable[[Candidate], float]
) -> tuple[Candidate, list[tuple[Candidate, float]]]:
    """The best-scoring entrant and every entrant's score.

    A single entrant is not scored (the acceptance test measures it anyway).
    Ties go to the fused entrant, then to the earlier one.
    """
    if len(entrants) == 1:
        return entrants[0], []
    scored = [(cand, score(cand)) for cand in entrants]
    best = max(
        range(len(scored)),
        key=lambda i: (scored[i][1], scored[i][0].fused, -i),
    )
    return scored[best][0], scored
