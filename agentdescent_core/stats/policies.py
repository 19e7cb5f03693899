"""Acceptance policies: turn base and candidate runs into a commit / no-commit verdict.

``betting`` (the default) is a paired test by betting that buys pairs of runs
one task at a time (:mod:`.betting`); ``paired`` is a stratified permutation
test run as a sequential plan of three looks; ``beta`` is the reference
design's rule, kept so the three can be compared on the same simulations
(``python -m bench.acceptance``).  What
each one guarantees is written up, with measured rates, in
``docs/statistics.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agentdescent_core.stats.beta import (
    annealed_delta,
    pooled_counts,
    pooled_improvement,
    posterior_improvement,
)
from agentdescent_core.stats.betting import BettingPolicy
from agentdescent_core.stats.permutation import STATISTICS, Statistic, permutation_test
from agentdescent_core.stats.samples import (
    AcceptanceDecision,
    TaskSamples,
    check_same_tasks,
    find_flips,
    flip_summary,
)

DEFAULT_REPEATS = 2
"""``--evolve-repeats``.  For ``betting``: a candidate may buy up to
:data:`PAIRS_PER_REPEAT` x this many pairs per task on average (6 by default).
For ``paired``: candidate repeats per task at the first look; later looks add as many."""

PAIRS_PER_REPEAT = 3
"""Pairs per task of the ``betting`` budget for each ``--evolve-repeats``."""

DEFAULT_LOOK_ALPHAS = (0.005, 0.01, 0.02)
"""Significance spent at each look; their sum, 3.5 %, bounds the false-accept rate."""

BASELINE_FACTOR = 12
"""Base repeats per candidate repeat (4x the last look's): see :func:`baseline_repeats`."""

DEFAULT_POLICY = "betting"


def baseline_repeats(repeats: int = DEFAULT_REPEATS) -> int:
    """Repeats to evaluate the base with, when candidates get ``repeats`` at the first look.

    The base is evaluated once per version and every candidate of that version
    is compared with it, so repeats spent on the base are shared; they shrink
    the base's half of the noise for all of them and are what lets the test
    see that a deterministic test's outcome really does repeat.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    return BASELINE_FACTOR * repeats


@runtime_checkable
class AcceptancePolicy(Protocol):
    """Anything that can judge a candidate against its base."""

    @property
    def name(self) -> str: ...

    def decide(
        self, base: TaskSamples, candidate: TaskSamples, *, version: int = 0
    ) -> AcceptanceDecision: ...


class PairTest(Protocol):
    """One candidate's sequential test: the caller buys the pairs it asks for."""

    def next_batch(self) -> list[str]:
        """Tasks to draw one more pair on (base run i, candidate run i); empty when decided."""
        ...

    def add(self, task: str, base: float, candidate: float) -> None: ...

    def decision(self) -> AcceptanceDecision: ...

    def samples(self) -> tuple[TaskSamples, TaskSamples]:
        """The (base, candidate) runs the pairs used so far."""
        ...


@runtime_checkable
class Sequential(Protocol):
    """A policy that decides pair by pair, choosing where the next pairs are drawn.

    ``agentdescent_core.aggregator.checks.run_pairs`` drives it: pair ``i`` of a
    task is the base's run ``i`` against the candidate's run ``i``, each run
    at most once per candidate, base runs shared by the candidates of one
    version (the verifier memoises them).
    """

    @property
    def name(self) -> str: ...

    def open(self, tasks: Sequence[str], weights: Mapping[str, float] | None = None
             ) -> PairTest: ...

    def decide(
        self, base: TaskSamples, candidate: TaskSamples, *, version: int = 0
    ) -> AcceptanceDecision: ...


def _fmt(x: float) -> str:
    return f"{x:.3g}"


@dataclass(frozen=True)
class PairedPolicy:
    """Stratified permutation test with a sequential plan (the default policy).

    The candidate is looked at after ``repeats``, ``2 * repeats``, ... repeats
    per task, one look per entry of ``look_alphas``.  At look ``i`` it is
    accepted when the permutation p-value is at most ``look_alphas[i]`` *and*
    its weighted mean reward went up.  A candidate that is not accepted but
    looks promising (p <= ``continue_below`` and mean up) is sent back for the
    next look with ``more_repeats``; anything else is rejected at once, which
    is where most of the savings come from.  The chance of ever accepting a
    candidate that changes nothing is at most ``sum(look_alphas)`` (each look
    is an exact test; Bonferroni over the looks), however flaky the tests.

    Consult the policy once per look: a caller that asks again and again with
    one more repeat each time spends the first look's alpha each time.
    ``version`` is accepted for the protocol and ignored: the bound holds at
    every version, so there is nothing to anneal.
    """

    repeats: int = DEFAULT_REPEATS
    look_alphas: tuple[float, ...] = DEFAULT_LOOK_ALPHAS
    continue_below: float = 0.4
    statistic: Statistic = "signed-square"
    permutations: int = 4000
    posterior_draws: int = 2000
    seed: int = 0

    name = "paired"

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {self.repeats}")
        if not self.look_alphas or any(not 0.0 < a < 1.0 for a in self.look_alphas):
            raise ValueError(f"look_alphas must be probabilities in (0, 1), got {self.look_alphas}")
        if sum(self.look_alphas) >= 1.0:
            raise ValueError(f"look_alphas must sum to less than 1, got {self.look_alphas}")
        if not 0.0 <= self.continue_below <= 1.0:
            raise ValueError(f"continue_below must be in [0, 1], got {self.continue_below}")
        if self.statistic not in STATISTICS:
            raise ValueError(
                f"unknown statistic {self.statistic!r}; choose one of {', '.join(STATISTICS)}"
            )

    @property
    def alpha(self) -> float:
        """Bound on the false-accept rate of a no-effect candidate over all looks."""
        return sum(self.look_alphas)

    @property
    def looks(self) -> tuple[int, ...]:
        """Candidate repeats per task at each look."""
        return tuple(self.repeats * (i + 1) for i in range(len(self.look_alphas)))

    def decide(
        self, base: TaskSamples, candidate: TaskSamples, *, version: int = 0
    ) -> AcceptanceDecision:
        check_same_tasks(base, candidate)
        flips = find_flips(base, candidate)
        reward_b, reward_c = base.reward(), candidate.reward()
        p_improvement = posterior_improvement(
            base, candidate, draws=self.posterior_draws, seed=self.seed
        )
        rewards = f"reward {reward_b:.3f} -> {reward_c:.3f}"
        tail = f"{rewards}; P(improvement)={p_improvement:.2f}; {flip_summary(flips)}"
        have, looks = candidate.min_repeats, self.looks

        def verdict(accept: bool, p: float | None, alpha: float, reason: str, more: int = 0
                    ) -> AcceptanceDecision:
            return AcceptanceDecision(
                accept=accept,
                category="committed" if accept else "below-threshold",
                p_improvement=p_improvement,
                p_value=p,
                threshold=alpha,
                reward_base=reward_b,
                reward_candidate=reward_c,
                flips=flips,
                reason=f"{reason}; {tail}",
                more_repeats=more,
                policy=self.name,
            )

        if have < looks[0]:
            more = looks[0] - have
            return verdict(
                False, None, self.look_alphas[0],
                f"not decided: the first look needs {looks[0]} candidate repeats per task, "
                f"has {have}; evaluate {more} more",
                more,
            )
        look = max(i for i, needed in enumerate(looks) if needed <= have)
        alpha = self.look_alphas[look]
        test = permutation_test(
            base, candidate, statistic=self.statistic, permutations=self.permutations,
            seed=self.seed,
        )
        p = test.p_value
        where = f"at look {look + 1}/{len(looks)} ({have} repeats)"
        went_up = reward_c > reward_b
        if p <= alpha and went_up:
            return verdict(True, p, alpha, f"p={_fmt(p)} <= {_fmt(alpha)} {where}")
        if p <= alpha:
            return verdict(
                False, p, alpha,
                f"p={_fmt(p)} <= {_fmt(alpha)} {where}, but the weighted mean reward did not rise",
            )
        if look + 1 < len(looks) and p <= self.continue_below and went_up:
            more = looks[look + 1] - have
            return verdict(
                False, p, alpha,
                f"p={_fmt(p)} > {_fmt(alpha)} {where} but promising "
                f"(<= {_fmt(self.continue_below)}): evaluate {more} more repeats per task",
                more,
            )
        return verdict(False, p, alpha, f"p={_fmt(p)} > {_fmt(alpha)} {where}")


@dataclass(frozen=True)
class BetaPolicy:
    """The reference design's rule, for comparison: pooled Beta posteriors, annealed delta.

    All tasks and repeats are pooled into one pass rate per version, each
    believed Beta(passes + 1, failures + 1); the candidate is accepted when
    P(candidate rate > base rate) > 1 - delta, with
    ``delta = max(min_delta, base_delta * 0.5 ** (version / half_life))``, and
    never when its pooled rate is below the base's (the hard regression
    guard).  At version 0 delta is 0.5, so any candidate that is more likely
    better than worse gets in: on flaky suites about half of the candidates
    that change nothing are accepted (see docs/statistics.md).
    """

    base_delta: float = 0.5
    half_life: float = 64.0
    min_delta: float = 0.01

    name = "beta"

    def decide(
        self, base: TaskSamples, candidate: TaskSamples, *, version: int = 0
    ) -> AcceptanceDecision:
        check_same_tasks(base, candidate)
        delta = annealed_delta(
            version, base_delta=self.base_delta, half_life=self.half_life, floor=self.min_delta
        )
        threshold = 1.0 - delta
        p_improvement = pooled_improvement(base, candidate)
        sb, fb = pooled_counts(base)
        sc, fc = pooled_counts(candidate)
        rate_b, rate_c = sb / (sb + fb), sc / (sc + fc)
        flips = find_flips(base, candidate)
        regressed = rate_c < rate_b
        accept = p_improvement > threshold and not regressed
        if regressed:
            why = f"pooled pass rate fell {rate_b:.3f} -> {rate_c:.3f} (regression guard)"
        else:
            cmp = ">" if p_improvement > threshold else "<="
            why = (
                f"P(improvement)={p_improvement:.3f} {cmp} 1-delta={threshold:.3f} "
                f"(delta={delta:.3g} at version {version}); pooled pass rate "
                f"{rate_b:.3f} -> {rate_c:.3f}"
            )
        reward_b, reward_c = base.reward(), candidate.reward()
        return AcceptanceDecision(
            accept=accept,
            category="committed" if accept else "below-threshold",
            p_improvement=p_improvement,
            p_value=None,
            threshold=threshold,
            reward_base=reward_b,
            reward_candidate=reward_c,
            flips=flips,
            reason=f"{why}; reward {reward_b:.3f} -> {reward_c:.3f}; {flip_summary(flips)}",
            more_repeats=0,
            policy=self.name,
        )


POLICIES: dict[str, type[BettingPolicy] | type[PairedPolicy] | type[BetaPolicy]] = {
    "betting": BettingPolicy,
    "paired": PairedPolicy,
    "beta": BetaPolicy,
}


def policy_for(name: str, repeats: int = DEFAULT_REPEATS, *,
               base_delta: float | None = None) -> AcceptancePolicy:
    """The policy ``name`` as ``--evolve-repeats repeats`` configures it.

    ``betting``: a budget of ``PAIRS_PER_REPEAT * repeats`` pairs per task on
    average; ``paired``: ``repeats`` at the first look; ``beta``: unaffected by
    ``repeats``, its starting tolerance is ``base_delta`` when one is given.
    """
    if name == "betting":
        return get_acceptance_policy(name, repeats=float(PAIRS_PER_REPEAT * repeats))
    if name == "paired":
        return get_acceptance_policy(name, repeats=repeats)
    if name == "beta" and base_delta is not None:
        return get_acceptance_policy(name, base_delta=float(base_delta))
    return get_acceptance_policy(name)


def get_acceptance_policy(name: str = DEFAULT_POLICY, **options: Any) -> AcceptancePolicy:
    """The policy called ``name``, built with ``options`` (its dataclass fields)."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(
            f"unknown acceptance policy {name!r}; valid policies: {', '.join(sorted(POLICIES))}"
        ) from None
    try:
        return cls(**options)
    except TypeError as exc:
        raise ValueError(f"bad option for acceptance policy {name!r}: {exc}") from None
