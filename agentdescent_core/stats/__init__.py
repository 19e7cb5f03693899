"""Acceptance statistics: does a candidate beat its base on the same tasks?

The default policy (``betting``) is a paired test by betting, an e-process
that buys pairs of runs (one base, one candidate, same task) where earlier
pairs say they are informative, so a change with no effect is accepted at most
5 % of the time however flaky the tests are and whenever the test stops.
``paired`` is an exact stratified permutation test run as a sequential plan of
three looks; ``beta`` is the reference design's pooled Beta-posterior rule,
kept for comparison.  The reasoning and
the measured rates are in ``docs/statistics.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentdescent_core.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "annealed_delta": "agentdescent_core.stats.beta",
    "pooled_improvement": "agentdescent_core.stats.beta",
    "posterior_improvement": "agentdescent_core.stats.beta",
    "STATISTICS": "agentdescent_core.stats.permutation",
    "PermutationResult": "agentdescent_core.stats.permutation",
    "Statistic": "agentdescent_core.stats.permutation",
    "permutation_test": "agentdescent_core.stats.permutation",
    "BettingTest": "agentdescent_core.stats.betting",
    "kelly_bet": "agentdescent_core.stats.betting",
    "DEFAULT_POLICY": "agentdescent_core.stats.policies",
    "PAIRS_PER_REPEAT": "agentdescent_core.stats.policies",
    "BettingPolicy": "agentdescent_core.stats.betting",
    "Sequential": "agentdescent_core.stats.policies",
    "policy_for": "agentdescent_core.stats.policies",
    "DEFAULT_REPEATS": "agentdescent_core.stats.policies",
    "POLICIES": "agentdescent_core.stats.policies",
    "AcceptancePolicy": "agentdescent_core.stats.policies",
    "BetaPolicy": "agentdescent_core.stats.policies",
    "PairedPolicy": "agentdescent_core.stats.policies",
    "baseline_repeats": "agentdescent_core.stats.policies",
    "get_acceptance_policy": "agentdescent_core.stats.policies",
    "PASS_THRESHOLD": "agentdescent_core.stats.samples",
    "AcceptanceDecision": "agentdescent_core.stats.samples",
    "Flip": "agentdescent_core.stats.samples",
    "FlipKind": "agentdescent_core.stats.samples",
    "TaskSamples": "agentdescent_core.stats.samples",
    "find_flips": "agentdescent_core.stats.samples",
}

__all__ = [
    "DEFAULT_POLICY",
    "DEFAULT_REPEATS",
    "PAIRS_PER_REPEAT",
    "PASS_THRESHOLD",
    "POLICIES",
    "STATISTICS",
    "AcceptanceDecision",
    "AcceptancePolicy",
    "BetaPolicy",
    "BettingPolicy",
    "BettingTest",
    "Flip",
    "FlipKind",
    "PairedPolicy",
    "PermutationResult",
    "Sequential",
    "Statistic",
    "TaskSamples",
    "annealed_delta",
    "baseline_repeats",
    "find_flips",
    "get_acceptance_policy",
    "kelly_bet",
    "permutation_test",
    "policy_for",
    "pooled_improvement",
    "posterior_improvement",
]

if TYPE_CHECKING:
    from agentdescent_core.stats.beta import (
        annealed_delta as annealed_delta,
        pooled_improvement as pooled_improvement,
        posterior_improvement as posterior_improvement,
    )
    from agentdescent_core.stats.betting import (
        BettingPolicy as BettingPolicy,
        BettingTest as BettingTest,
        kelly_bet as kelly_bet,
    )
    from agentdescent_core.stats.permutation import (
        STATISTICS as STATISTICS,
        PermutationResult as PermutationResult,
        Statistic as Statistic,
        permutation_test as permutation_test,
    )
    from agentdescent_core.stats.policies import (
        DEFAULT_POLICY as DEFAULT_POLICY,
        DEFAULT_REPEATS as DEFAULT_REPEATS,
        PAIRS_PER_REPEAT as PAIRS_PER_REPEAT,
        POLICIES as POLICIES,
        AcceptancePolicy as AcceptancePolicy,
        BetaPolicy as BetaPolicy,
        PairedPolicy as PairedPolicy,
        Sequential as Sequential,
        baseline_repeats as baseline_repeats,
        get_acceptance_policy as get_acceptance_policy,
        policy_for as policy_for,
    )
    from agentdescent_core.stats.samples import (
        PASS_THRESHOLD as PASS_THRESHOLD,
        AcceptanceDecision as AcceptanceDecision,
        Flip as Flip,
        FlipKind as FlipKind,
        TaskSamples as TaskSamples,
        find_flips as find_flips,
    )


# Loaded on first use, so importing the standard-library-only ``samples`` module (the
# child recorder does) does not pull in numpy and scipy.
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
