"""The per-candidate checks of a firing: card validation, acceptance, guards.

Validation runs first and costs no evaluation; the acceptance test follows the
statistics package's calling protocol (base at the baseline repeats,
candidate at ``repeats``, more candidate repeats while the policy asks for
them); guards come last and only veto.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentdescent_core.aggregator.config import AggregatorConfig
from agentdescent_core.aggregator.store import ArtifactStore
from agentdescent_core.errors import RefusalError
from agentdescent_core.evaluation.protocol import Verifier
from agentdescent_core.evidence import EvidenceCard, MergeOutcome
from agentdescent_core.stats.policies import AcceptancePolicy
from agentdescent_core.stats.samples import PASS_THRESHOLD, AcceptanceDecision

__all__ = ["GuardRegression", "Refusal", "accept", "check_ops", "guard_regressions",
           "validate_card"]

#: Upper bound on sequential looks, so a policy that keeps asking cannot loop forever.
MAX_LOOKS = 16


@dataclass(frozen=True)
class Refusal:
    category: str
    reason: str


def check_ops(
    ops: Mapping[str, str | None], store: ArtifactStore, config: AggregatorConfig
) -> Refusal | None:
    """Trust region, then the strategy's and the ledger's rules for these ops."""
    if len(ops) > config.trust_region_ops:
        return Refusal(
            MergeOutcome.OVERSIZED.value,
            f"changes {len(ops)} keys, more than trust_region_ops={config.trust_region_ops}; "
            "propose a smaller step",
        )
    for key, value in ops.items():
        if value is not None and len(value) > config.trust_region_chars:
            return Refusal(
                MergeOutcome.OVERSIZED.value,
                f"{key!r} would be {len(value)} characters, more than "
                f"trust_region_chars={config.trust_region_chars}",
            )
    categories = getattr(store.strategy, "categories", None)
    if categories is not None:
        unknown = sorted(set(ops) - set(categories))
        if unknown:
            return Refusal(
                MergeOutcome.INVALID_PROPOSAL.value,
                f"keys {unknown[:5]} are not categories of the strategy ({list(categories)})",
            )
    try:
        store.codec.tree.validate_ops(store.codec.to_files(ops))
    except RefusalError as exc:
        return Refusal(exc.category, f"{exc.code}: {exc.message}")
    return None


def validate_card(
    card: EvidenceCard, store: ArtifactStore, config: AggregatorConfig
) -> Refusal | None:
    """Why a card cannot enter the merge at all, or None."""
    if card.artifact_id != store.artifact_id:
        return Refusal(
            MergeOutcome.UNKNOWN_ARTIFACT.value,
            f"card from {card.worker} targets artifact {card.artifact_id!r}; this aggregator "
            f"holds only {store.artifact_id!r}",
        )
    if card.allowed_keys is not None:
        outside = sorted(set(card.diff.ops) - set(card.allowed_keys))
        if outside:
            return Refusal(
                MergeOutcome.SECTION_VIOLATION.value,
                f"card from {card.worker} edits {outside[:5]} outside its section "
                f"({sorted(card.allowed_keys)[:5]})",
            )
    if not card.diff.ops:
        return Refusal(MergeOutcome.INVALID_PROPOSAL.value,
                       f"card from {card.worker} has no ops")
    refusal = check_ops(card.diff.ops, store, config)
    if refusal is not None:
        return Refusal(refusal.category, f"card from {card.worker}: {refusal.reason}")
    return None


def accept(
    verifier: Verifier,
    policy: AcceptancePolicy,
    base: Mapping[str, str],
    candidate: Mapping[str, str],
    tasks: Sequence[str],
    config: AggregatorConfig,
    *,
    version: int,
) -> AcceptanceDecision:
    """Run the acceptance test's sequential plan to a verdict."""
    base_samples = verifier.evaluate(base, tasks, config.base_repeats)
    have = config.repeats
    samples = verifier.evaluate(candidate, tasks, have)
    decision = policy.decide(base_samples, samples, version=version)
    looks = 1
    while decision.more_repeats > 0 and looks < MAX_LOOKS:
        have += decision.more_repeats
        # The verifier returns the first ``have`` repeats and reuses the ones it has,
        # so this is the earlier samples extended by the newly run repeats.
        samples = verifier.evaluate(candidate, tasks, have)
        decision = policy.decide(base_samples, samples, version=version)
        looks += 1
    return decision


@dataclass(frozen=True)
class GuardRegression:
    task: str
    before: float
    after: float


def guard_regressions(
    verifier: Verifier,
    base: Mapping[str, str],
    candidate: Mapping[str, str],
    guards: Sequence[str],
    repeats: int,
) -> list[GuardRegression]:
    """Guards that pass on ``base`` and fail on ``candidate`` (mean reward vs PASS_THRESHOLD)."""
    if not guards:
        return []
    before = verifier.evaluate(base, guards, repeats)
    after = verifier.evaluate(candidate, guards, repeats)
    return [
        GuardRegression(task, before.mean(task), after.mean(task))
        for task in guards
        if before.mean(task) >= PASS_THRESHOLD > after.mean(task)
    ]
