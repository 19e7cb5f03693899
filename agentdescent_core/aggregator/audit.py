"""The audit gate's bookkeeping: the oracle budget and the trust in the cheap signal.

Cheap evidence (a worker's self-verification, or a few eval tasks) is what
makes proposals plentiful; the full evaluation and the oracle are what make
them trustworthy.  ``trust`` is the share of merges on which the cheap
verdict ("the candidate improves") agreed with the full evaluation's.  It is
measured on every merge that reaches the acceptance test, at no extra cost,
so a low-blast-radius artifact whose cheap signal starts to mislead earns an
audit too, not only L1 artifacts.

The scheduler also ranks candidates by ``blast_radius * uncertainty / trust``
(how much an audit would be worth); the ranking is kept only with
``collect=True``, for an out-of-band auditor, since the inline gate in the
merge pipeline reads trust and budget, not the queue.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from agentdescent_core.governance import Layer, classify


@dataclass(frozen=True)
class AuditDecision:
    """Whether the gate sends a candidate to the oracle, and why (for the report)."""

    audit: bool
    reason: str


@dataclass
class AuditScheduler:
    """Oracle budget, trust measurement and audit priority for one run."""

    oracle_budget: int = 200
    trust_floor: float = 0.8
    collect: bool = False
    oracle_calls_used: int = 0
    agreements: int = 0
    measured: int = 0
    audits: int = 0
    vetoes: int = 0
    queue: list[tuple[float, int, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.oracle_budget < 0:
            raise ValueError(f"oracle_budget must be >= 0, got {self.oracle_budget}")
        if not 0.0 <= self.trust_floor <= 1.0:
            raise ValueError(f"trust_floor must be in [0, 1], got {self.trust_floor}")

    @property
    def trust(self) -> float:
        """Agreement rate of the cheap and the full verdicts (1.0 before any merge)."""
        return self.agreements / self.measured if self.measured else 1.0

    @property
    def remaining(self) -> int:
        return max(0, self.oracle_budget - self.oracle_calls_used)

    def record(self, cheap_improves: bool, full_improves: bool) -> float:
        """Count one merge's agreement between the cheap and the full verdict; the new trust."""
        self.measured += 1
        if cheap_improves == full_improves:
            self.agreements += 1
        return self.trust

    def priority(self, blast_radius: float, uncertainty: float) -> float:
        """How much an audit of this candidate is worth: radius x uncertainty / trust."""
        return blast_radius * max(0.0, uncertainty) / max(self.trust, 1e-6)

    def submit(self, candidate_id: str, blast_radius: float, uncertainty: float) -> float:
        """Rank a candidate; kept in ``queue`` only with ``collect=True``."""
        value = self.priority(blast_radius, uncertainty)
        if self.collect:
            heapq.heappush(self.queue, (-value, len(self.queue), candidate_id))
        return value

    def gate(self, blast_radius: float, *, cost: int = 1) -> AuditDecision:
        """Should this candidate go through the oracle before acceptance?"""
        wants = []
        if classify(blast_radius) is Layer.L1:
            wants.append(f"blast radius {blast_radius:.2f} makes it L1")
        if self.trust < self.trust_floor:
            wants.append(
                f"trust {self.trust:.2f} ({self.agreements}/{self.measured}) is below "
                f"the floor {self.trust_floor:.2f}"
            )
        if not wants:
            return AuditDecision(False, f"no audit: L2 and trust {self.trust:.2f}")
        if self.remaining < cost:
            return AuditDecision(
                False,
                f"audit wanted ({'; '.join(wants)}) but the oracle budget is spent "
                f"({self.oracle_calls_used}/{self.oracle_budget})",
            )
        return AuditDecision(True, "audit: " + "; ".join(wants))

    def spend(self, calls: int) -> None:
        self.oracle_calls_used += calls
