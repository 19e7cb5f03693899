"""Proposals handed to the engine, waiting for the round whose verdicts say what became of them.

When it is used: both proposers of ``pytest --evolve`` file every edit they
hand on here — the conftest hook's
(:class:`~pytest_agentdescent.proposer.HookProposer`, which keeps each edit in
the memory of attempts with its verdict) and ``--evolve-model``'s
(:class:`~pytest_agentdescent.model_proposer.ModelProposer`, which settles its
report entry and shows a rejection in its next prompt).  At the end of a round
each calls :meth:`PendingProposals.settle` with the round's
:class:`~agentdescent_core.loop.result.RoundInfo` and gets its proposals back
paired with their :class:`~agentdescent_core.memory.Verdict`.  Why one place:
two matchers drifted apart (one read the round's message strings), and a
proposal is judged by one rule whichever proposer made it.

The rules, read from the structured verdicts, never from message text:

- **by content**: a verdict whose key is the proposal's content key
  (:func:`~agentdescent_core.memory.content_key`), in any round — a card
  re-filed after a lost compare-and-swap is judged in a later round;
- **else by worker**, in the proposal's own round only: the first verdict
  naming its worker that no other proposal of that worker took, by content or
  by worker — a rebased or fused candidate (another key, its workers joined),
  or a refusal by the strategy or the guardrails (no diff at all).  Never a
  refusal by the proposer (``Verdict.refused_by == "proposer"``): that answer
  raised instead of being handed on, so it was never filed here;
- **a lost compare-and-swap** (``cas-conflict``) is no verdict yet: it is handed
  back so the caller can note it, and stays pending for the round that judges
  the re-filed card;
- **no verdict names it**: dropped once its round is over (it lost the round's
  tournament, or failed its own re-run); a proposal of a later round waits.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentdescent_core.evidence import MergeOutcome

if TYPE_CHECKING:
    from agentdescent_core.loop.result import RoundInfo
    from agentdescent_core.memory import Verdict

@dataclass(frozen=True)
class Pending:
    """One proposal handed to the engine whose verdict a round will tell.

    ``key`` is the :func:`~agentdescent_core.memory.content_key` of the edit
    (what it changed against the files it was proposed for); ``tasks`` the
    train tests it was proposed for; ``summary`` / ``rationale`` / ``paths``
    what the filer wants to keep with the verdict; ``ticket`` is the filer's own
    handle for it (the model proposer: the index of its report entry), -1 for none.
    """

    round: int
    worker: str
    tasks: tuple[str, ...]
    key: str
    summary: str = ""
    rationale: str = ""
    paths: tuple[str, ...] = ()
    ticket: int = -1


def match_verdicts(pending: Sequence[Pending], info: RoundInfo) -> list[Verdict | None]:
    """The verdict of ``info`` about each of ``pending`` (None where none is), by the rules
    of this module: content first for every proposal, then the worker in its own round."""
    verdicts = info.verdicts
    by_key: dict[str, tuple[int, Verdict]] = {}
    for index, verdict in enumerate(verdicts):
        if verdict.key:
            by_key.setdefault(verdict.key, (index, verdict))
    found: list[Verdict | None] = [None] * len(pending)
    used: set[tuple[int, str]] = set()
    for position, item in enumerate(pending):  # content first: a worker route never steals
        hit = by_key.get(item.key) if item.key else None
        if hit is not None:
            found[position] = hit[1]
            used.add((hit[0], item.worker))
    for position, item in enumerate(pending):
        if found[position] is not None or item.round != info.round:
            continue
        for index, verdict in enumerate(verdicts):
            if item.worker in verdict.workers and verdict.refused_by != "proposer" and \
                    (index, item.worker) not in used:
                used.add((index, item.worker))
                found[position] = verdict
                break
    return found


class PendingProposals:
    """The proposals of one proposer waiting for their verdicts; thread-safe (workers
    file while the controller settles a round)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Pending] = []

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def file(self, item: Pending) -> None:
        """Wait for the verdict about ``item`` (a proposal just handed to the engine)."""
        with self._lock:
            self._items.append(item)

    def settle(self, info: RoundInfo) -> list[tuple[Pending, Verdict]]:
        """The proposals ``info`` judged, each with its verdict, in filing order.

        A ``cas-conflict`` pair is returned too and its proposal stays pending; a
        proposal of this round or an earlier one that no verdict names is dropped.
        """
        with self._lock:
            items, self._items = self._items, []
        settled: list[tuple[Pending, Verdict]] = []
        kept: list[Pending] = []
        for item, verdict in zip(items, match_verdicts(items, info), strict=True):
            if verdict is None:
                if item.round > info.round:
                    kept.append(item)
                continue
            settled.append((item, verdict))
            if verdict.category == MergeOutcome.CAS_CONFLICT:  # re-filed, judged later
                kept.append(item)
        with self._lock:
            self._items[:0] = kept  # before anything filed meanwhile
        return settled
