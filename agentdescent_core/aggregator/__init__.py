"""The aggregator: turns workers' evidence cards into commits on the dev branch.

Cards are bucketed per artifact; a bucket fires at ``batch_size`` cards or
after ``t_max`` rounds.  A firing validates the cards, filters stale ones
(:mod:`agentdescent_core.staleness`), resolves contradictions and fuses what
is complementary (:mod:`.conflicts`, :mod:`.fusion`), audits (:mod:`.audit`),
runs the acceptance test and the guards, and commits by compare-and-swap
(:mod:`.store`); dev is promoted to stable once it has held still.
"""

from __future__ import annotations

from agentdescent_core.aggregator.aggregator import Aggregator, AggregatorProtocol
from agentdescent_core.aggregator.audit import AuditDecision, AuditScheduler
from agentdescent_core.aggregator.config import AggregatorConfig
from agentdescent_core.aggregator.store import ArtifactStore

__all__ = [
    "Aggregator",
    "AggregatorConfig",
    "AggregatorProtocol",
    "ArtifactStore",
    "AuditDecision",
    "AuditScheduler",
]
