"""Acceptance statistics: does a candidate beat its base on the same tasks and repeats?

The default policy (``paired``) is an exact stratified permutation test run as
a sequential plan of three looks, so a change with no effect is accepted at most
3.5 % of the time however flaky the tests are, while a candidate that really
fixes tests is accepted on few evaluations.  ``beta`` is the reference
design's pooled Beta-posterior rule, kept for comparison.  The reasoning and
the measured rates are in ``docs/statistics.md``.
"""

from __future__ import annotations

from agentdescent_core.stats.beta import (
    annealed_delta,
    pooled_improvement,
    posterior_improvement,
)
from agentdescent_core.stats.permutation import (
    STATISTICS,
    PermutationResult,
    Statistic,
    permutation_test,
)
from agentdescent_core.stats.policies import (
    DEFAULT_POLICY,
    DEFAULT_REPEATS,
    POLICIES,
    AcceptancePolicy,
    BetaPolicy,
    PairedPolicy,
    baseline_repeats,
    get_acceptance_policy,
)
from agentdescent_core.stats.samples import (
    PASS_THRESHOLD,
    AcceptanceDecision,
    Flip,
    FlipKind,
    TaskSamples,
    find_flips,
)

__all__ = [
    "DEFAULT_POLICY",
    "DEFAULT_REPEATS",
    "PASS_THRESHOLD",
    "POLICIES",
    "STATISTICS",
    "AcceptanceDecision",
    "AcceptancePolicy",
    "BetaPolicy",
    "Flip",
    "FlipKind",
    "PairedPolicy",
    "PermutationResult",
    "Statistic",
    "TaskSamples",
    "annealed_delta",
    "baseline_repeats",
    "find_flips",
    "get_acceptance_policy",
    "permutation_test",
    "pooled_improvement",
    "posterior_improvement",
]
