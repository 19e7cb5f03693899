"""Candidates and the key-level algebra the aggregator combines them with.

A :class:`Candidate` is a set of ops against the current dev head plus the
cards it came from (several when duplicates collapsed or a fusion happened).
Combining two values of one key follows one rule: identical values are the
same proposal; for text files (a FileTree) two different edits of one file
are merged line by line against the file they both started from, and only
a merge git cannot decide is a contradiction; for every other strategy two
different values of one key contradict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agentdescent_core.artifacts.diff import apply_ops, diff_id_for
from agentdescent_core.artifacts.merge3 import Merge3Error, merge3
from agentdescent_core.evidence import EvidenceCard

Ops = dict[str, str | None]


class _Contradiction:
    """Marker for a pair of values that cannot both hold."""


CONTRADICTION = _Contradiction()


@dataclass(frozen=True)
class Candidate:
    """Ops against the dev head, and the cards that proposed them."""

    cards: tuple[EvidenceCard, ...]
    ops: Mapping[str, str | None]
    fused: bool = False

    @property
    def key(self) -> str:
        """Content identity of the ops (duplicates share it)."""
        return diff_id_for("candidate", self.ops)

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t for card in self.cards for t in card.tasks))

    @property
    def workers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(card.worker for card in self.cards))

    @property
    def label(self) -> str:
        kind = "fused" if self.fused else "diff"
        return f"{kind} {self.key[:8]} by {', '.join(self.workers)}"

    def state(self, head: Mapping[str, str]) -> dict[str, str]:
        return apply_ops(head, self.ops)


def merge_value(
    base: str | None, ours: str | None, theirs: str | None, *, textual: bool
) -> str | _Contradiction | None:
    """One value for a key both sides set, or CONTRADICTION.

    ``base`` is the key's value both edits started from (None: absent).
    """
    if ours == theirs:
        return ours
    if ours == base:
        return theirs
    if theirs == base:
        return ours
    if not textual or ours is None or theirs is None:
        return CONTRADICTION
    try:
        merged = merge3(base or "", ours, theirs)
    except Merge3Error:
        return CONTRADICTION
    return merged.text if merged.clean else CONTRADICTION


def combine_ops(
    head: Mapping[str, str], first: Mapping[str, str | None], second: Mapping[str, str | None],
    *, textual: bool,
) -> Ops | None:
    """The union of two head-relative op sets, or None when some key contradicts."""
    combined: Ops = dict(first)
    for key, value in second.items():
        if key not in combined:
            combined[key] = value
            continue
        merged = merge_value(head.get(key), combined[key], value, textual=textual)
        if isinstance(merged, _Contradiction):
            return None
        combined[key] = merged
    return combined


def rebase_ops(
    base: Mapping[str, str] | None, head: Mapping[str, str], ops: Mapping[str, str | None],
    *, textual: bool,
) -> tuple[Ops, list[str]]:
    """Ops made against ``base`` re-expressed against ``head``; also the keys that clash.

    A key the head did not change since ``base`` keeps the proposed value.  A
    key both changed is 3-way merged for text files; elsewhere (or when the
    base is unknown) the proposed value wins, and the re-verification decides
    whether it still helps.  Clashing keys keep the proposed value.
    """
    rebased: Ops = {}
    clashes: list[str] = []
    for key, value in ops.items():
        rebased[key] = value
        if base is None or not textual:
            continue
        was, now = base.get(key), head.get(key)
        if was == now or value == now:
            continue
        merged = merge_value(was, now, value, textual=True)
        if isinstance(merged, _Contradiction):
            clashes.append(key)
        else:
            rebased[key] = merged
    return rebased, clashes
