"""What a run returns: the evolved artifact, how it got there, and why it stopped.

``error`` is None only on a clean run; ``stop_reason`` always says why the run
stopped ("target_reward", "patience", "rounds", "max_seconds", "max_calls",
"max_iters" (the async rollout budget), "error"), so a spent budget is never
mistaken for convergence.  ``history`` holds one :class:`RoundInfo` per round
on the synchronous path and one per non-empty merger sweep on the async one.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentdescent_core.evidence import EvidenceCard, MergeReport
from agentdescent_core.loop.durations import Straggler
from agentdescent_core.memory import Verdict, verdict_of


@dataclass(frozen=True)
class RoundInfo:
    """One round (sync) or merger sweep (async): the head reward after it and what merged.

    ``reward`` is the eval-task (held-out) reward of the dev head after the
    round — carried forward from the last measurement when it could not be
    measured.  ``considered`` / ``discarded_stale`` / ``conflicts_dropped`` sum
    over the round's merge reports; ``fused`` counts commits whose winner was a
    fusion; ``merged`` counts commits; ``reasons`` tallies the categories.
    ``verdicts`` holds one :class:`~agentdescent_core.memory.Verdict` per merge
    decision (who proposed what, the evidence, the flips): what a memory of
    attempts records.
    """

    round: int
    reward: float | None
    version: int = 0
    considered: int = 0
    discarded_stale: int = 0
    conflicts_dropped: int = 0
    fused: int = 0
    merged: int = 0
    reasons: Mapping[str, int] = field(default_factory=dict)
    messages: tuple[str, ...] = ()
    proposals: int = 0
    worker_errors: int = 0
    seconds: float = 0.0
    verdicts: tuple[Verdict, ...] = ()

    @property
    def held_out_reward(self) -> float | None:
        return self.reward

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["reasons"] = dict(self.reasons)
        data["messages"] = list(self.messages)
        data["verdicts"] = [asdict(v) for v in self.verdicts]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RoundInfo:
        fields = dict(data)
        fields["reasons"] = dict(fields.get("reasons", {}))
        fields["messages"] = tuple(fields.get("messages", ()))
        fields["verdicts"] = tuple(Verdict.from_json(v) for v in fields.get("verdicts", ()))
        return cls(**fields)


def round_info(
    round_index: int,
    reward: float | None,
    reports: Iterable[MergeReport],
    *,
    version: int = 0,
    proposals: int = 0,
    worker_errors: int = 0,
    seconds: float = 0.0,
    cards: Sequence[EvidenceCard] = (),
) -> RoundInfo:
    """Sum a round's merge reports into its RoundInfo (``cards``: the round's evidence,
    which says which tasks each verdict was about)."""
    listed = list(reports)
    return RoundInfo(
        round=round_index,
        reward=reward,
        version=version,
        considered=sum(r.considered for r in listed),
        discarded_stale=sum(r.discarded_stale for r in listed),
        conflicts_dropped=sum(r.conflicts_dropped for r in listed),
        fused=sum(1 for r in listed if r.fused and r.committed),
        merged=sum(1 for r in listed if r.committed),
        reasons=dict(Counter(r.category for r in listed)),
        messages=tuple(f"{r.category}: {r.reason}" for r in listed),
        verdicts=tuple(verdict_of(r, cards) for r in listed),
        proposals=proposals,
        worker_errors=worker_errors,
        seconds=round(seconds, 3),
    )


@dataclass
class EvolutionResult:
    """The outcome of ``evolve()`` / ``async_evolve()``; check ``error`` before trusting it.

    ``stragglers`` lists the rollouts that overran their predicted duration
    (empty unless a ``duration_estimator=`` was given); ``len()`` is the count.
    """

    rendered: str
    state: dict[str, str]
    final_reward: float | None
    initial_reward: float | None = None
    history: list[RoundInfo] = field(default_factory=list)
    ledger_log: list[str] = field(default_factory=list)
    error: str | None = None
    stop_reason: str = "rounds"
    retired_workers: int = 0
    usage: dict[str, float] = field(default_factory=dict)
    version: int = 0
    forced_refreshes: int = 0
    repo_path: str | None = None
    asynchronous: bool = False
    stragglers: list[Straggler] = field(default_factory=list)

    def outcomes(self) -> dict[str, int]:
        """Merge decisions of the whole run by category, e.g. {'committed': 2, ...}."""
        total: Counter[str] = Counter()
        for info in self.history:
            total.update(info.reasons)
        return dict(sorted(total.items()))

    @property
    def rounds(self) -> int:
        return len(self.history)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["history"] = [info.to_json() for info in self.history]
        data["outcomes"] = self.outcomes()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvolutionResult:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["history"] = [RoundInfo.from_json(h) for h in data.get("history", [])]
        fields["state"] = dict(data.get("state", {}))
        fields["stragglers"] = [Straggler.from_json(s) for s in data.get("stragglers", [])]
        return cls(**fields)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the result (state, rendered, history, error, ...) as JSON."""
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(self.to_json(), handle, indent=2, sort_keys=True, ensure_ascii=False)
            handle.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EvolutionResult:
        """Read a result written by :meth:`save`."""
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        if not isinstance(data, dict) or "state" not in data or "rendered" not in data:
            raise ValueError(
                f"{os.fspath(path)!r} is not a saved EvolutionResult (no 'state'/'rendered'); "
                "write one with result.save(path)"
            )
        return cls.from_json(data)
