"""The per-candidate checks of a firing: card validation, acceptance, guards.

Validation runs first and costs no evaluation; the acceptance test follows the
statistics package's calling protocol: a sequential policy (the default
``betting``) is fed the pairs it asks for, task by task; any other gets the
base at the baseline repeats, the candidate at ``repeats`` and more candidate
repeats while it asks for them.  Guards come last and only veto.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentdescent_core.aggregator.config import AggregatorConfig
from agentdescent_core.aggregator.store import ArtifactStore
from agentdescent_core.errors import RefusalError
from agentdescent_core.evaluation.protocol import Selective, Verifier
from agentdescent_core.evidence import EvidenceCard, MergeOutcome
from agentdescent_core.stats.policies import AcceptancePolicy, Sequential
from agentdescent_core.stats.samples import PASS_THRESHOLD, AcceptanceDecision, TaskSamples

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


@dataclass(frozen=True)
class PairRun:
    """What an acceptance test concluded, and the runs it used.

    ``pairs`` counts the pairs a sequential test drew; it is 0 for a policy
    that is not sequential (it compared whole evaluations, see
    :func:`run_acceptance`).
    """

    decision: AcceptanceDecision
    base: TaskSamples
    candidate: TaskSamples
    pairs: int


def run_pairs(
    verifier: Verifier,
    policy: Sequential,
    base: Mapping[str, str],
    candidate: Mapping[str, str],
    tasks: Sequence[str],
) -> PairRun:
    """Feed ``policy``'s test the pairs it asks for until it decides.

    Pair ``i`` of a task is the base's run ``i`` against the candidate's run
    ``i``: the verifier returns the first ``i + 1`` runs and reuses those it
    has, so the base's runs are a pool shared by every candidate of the
    version (its run 0 is the baseline evaluation), each used at most once per
    candidate, and a base run a pair uses was never looked at by this
    candidate's test before its task was chosen.  A batch (every task that
    earned another pair) is evaluated together, so its runs go in parallel.
    """
    ids = list(dict.fromkeys(tasks))
    if isinstance(verifier, Selective):
        selection = verifier.select_tests(base, candidate, ids)
        ids = list(selection.selected)
        if not ids:
            return _unreachable(verifier, policy, base, candidate, tasks, selection.touched)
    weights = {t: verifier.split.weight(t) for t in ids}
    test = policy.open(ids, weights)
    used = dict.fromkeys(ids, 0)
    pairs = 0
    while batch := test.next_batch():
        by_index: dict[int, list[str]] = {}
        for task in batch:
            by_index.setdefault(used[task], []).append(task)
        for index, group in sorted(by_index.items()):
            runs_b = verifier.evaluate(base, group, index + 1)
            runs_c = verifier.evaluate(candidate, group, index + 1)
            for task in group:
                test.add(task, runs_b.rewards[task][index], runs_c.rewards[task][index])
                used[task] = index + 1
                pairs += 1
    decision = test.decision()
    base_samples, cand_samples = test.samples()
    return PairRun(decision, base_samples, cand_samples, pairs)


def _unreachable(verifier: Verifier, policy: Sequential, base: Mapping[str, str],
                 candidate: Mapping[str, str], tasks: Sequence[str],
                 touched: Sequence[str]) -> PairRun:
    """The verdict on a candidate no task can tell from its base: rejected, no pair drawn.

    Its runs are the base's first runs, kept for every task (the change reaches
    none), so the samples cost nothing.
    """
    base_samples = verifier.evaluate(base, tasks, 1)
    cand_samples = verifier.evaluate(candidate, tasks, 1)
    shown = ", ".join(touched[:3]) + (f" and {len(touched) - 3} more" if len(touched) > 3
                                      else "")
    decision = AcceptanceDecision(
        accept=False, category=MergeOutcome.BELOW_THRESHOLD.value, p_improvement=0.0,
        p_value=None, threshold=float(getattr(policy.open(list(tasks)), "threshold", 0.0)),
        reward_base=base_samples.reward(), reward_candidate=cand_samples.reward(), flips=[],
        reason=f"no test read what it changes ({shown or 'nothing'}), so no run can tell it "
               "from the base", policy=policy.name,
    )
    return PairRun(decision, base_samples, cand_samples, 0)


def run_acceptance(
    verifier: Verifier,
    policy: AcceptancePolicy,
    base: Mapping[str, str],
    candidate: Mapping[str, str],
    tasks: Sequence[str],
    config: AggregatorConfig,
    *,
    version: int,
) -> PairRun:
    """Run the acceptance test's sequential plan to a verdict, keeping the runs it used.

    The one acceptance loop: the aggregator takes its decision, and
    ``agentdescent review`` also shows the runs behind the verdict in its
    per-test table.  A :class:`Sequential`
    policy is fed the pairs it asks for (:func:`run_pairs`); any other gets the
    base at ``config.base_repeats``, the candidate at ``config.repeats`` and
    more candidate repeats while it asks for them, at most :data:`MAX_LOOKS`
    looks.
    """
    if isinstance(policy, Sequential):
        return run_pairs(verifier, policy, base, candidate, tasks)
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
    return PairRun(decision, base_samples, samples, 0)


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
