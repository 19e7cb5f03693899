"""Stratified permutation test: is the candidate better than its base?

Why this test.  If the candidate's edit has no effect, then within one task
the base's repeats and the candidate's repeats are draws of the same random
outcome, so which of them carries the label "candidate" is arbitrary.
Reshuffling the labels *within each task* (never across tasks, whose pass
rates differ) therefore produces data exactly as likely as what was observed,
and the share of reshuffles scoring at least as high as the observation is an
exact p-value — no normal approximation, no assumption about how flaky a test
is.  Tasks whose pooled outcomes are all identical (deterministic tests that
neither version changed) reshuffle to themselves and add no noise, which is
why a single fixed test on a deterministic suite is significant.

The score.  Each task's change is standardised by its own reshuffling
spread, ``z = (candidate mean - pooled mean) / sd``, and the score is
``sum(weight * z * |z|)``.  Squaring keeps the sign but lets one task that
moved far outweigh several that wobbled, which is the shape of real edits to
a skill file: a few tasks change a lot, most not at all.  On the flaky
scenario of ``docs/statistics.md`` it accepts far more real improvements than
the plain sum of mean differences (offered as ``"mean-difference"``) at the
same false-accept rate.

The distribution is enumerated exactly while it stays small (few tasks vary,
or pass/fail rewards with a lattice score) and sampled otherwise, with the
``+1`` correction that keeps a sampled p-value valid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from agentdescent_core.stats.samples import TaskSamples, check_same_tasks

Statistic = Literal["signed-square", "mean-difference"]
STATISTICS: tuple[Statistic, ...] = ("signed-square", "mean-difference")

FloatArray = NDArray[np.float64]

_ROUND = 9  # decimals at which enumerated scores are merged into one value
_TIE = 1e-7  # relative gap below which a reshuffle counts as scoring the same as the data
# Counting a near-tie as a tie can only raise the p-value, so this errs on the safe side.


@dataclass(frozen=True)
class PermutationResult:
    """The observed score and its one-sided p-value (large score = candidate better)."""

    statistic: float
    p_value: float
    exact: bool
    permutations: int
    """Reshuffles sampled; 0 when the distribution was enumerated exactly."""


@dataclass(frozen=True)
class _Term:
    """One task's contribution to the score, as a function of the candidate's reward sum."""

    pooled: FloatArray
    n_candidate: int
    weight: float
    observed_sum: float
    statistic: Statistic

    @property
    def n(self) -> int:
        return int(self.pooled.size)

    @property
    def binary(self) -> bool:
        return bool(np.all((self.pooled == 0.0) | (self.pooled == 1.0)))

    def value(self, candidate_sum: FloatArray) -> FloatArray:
        n, r = self.n, self.n_candidate
        total = float(self.pooled.sum())
        if self.statistic == "mean-difference":
            return self.weight * (candidate_sum / r - (total - candidate_sum) / (n - r))
        spread = float(self.pooled.var()) / r * (n - r) / (n - 1)
        z = (candidate_sum / r - total / n) / math.sqrt(spread)
        return self.weight * z * np.abs(z)

    def binary_distribution(self) -> tuple[FloatArray, FloatArray]:
        """Values and probabilities for pass/fail rewards: the candidate's pass count is
        hypergeometric (``r`` draws from ``n`` runs of which ``good`` passed)."""
        n, r = self.n, self.n_candidate
        from scipy import stats  # here: scipy.stats costs a second to import

        good = int(self.pooled.sum())
        k = np.arange(max(0, r - (n - good)), min(r, good) + 1, dtype=np.float64)
        probs = np.asarray(stats.hypergeom.pmf(k, n, good, r), dtype=np.float64)
        return self.value(k), probs

    def exact_distribution(self) -> tuple[FloatArray, FloatArray]:
        """All values this term takes under reshuffling, with their probabilities."""
        if self.binary:
            return self.binary_distribution()
        sums = np.fromiter(
            (sum(c) for c in combinations(self.pooled.tolist(), self.n_candidate)),
            dtype=np.float64,
        )
        return self.value(sums), np.full(sums.size, 1.0 / sums.size)

    def key(self) -> tuple[object, ...]:
        """Terms with equal keys have the same distribution."""
        return (self.statistic, self.n_candidate, self.weight, tuple(np.sort(self.pooled)))

    def sample_values(self, rng: np.random.Generator, draws: int) -> FloatArray:
        """This term's score under ``draws`` random reshuffles."""
        n, r = self.n, self.n_candidate
        if self.binary:
            # Inverse-CDF draws from the exact hypergeometric law: same law as
            # shuffling, a fraction of the cost.
            values, probs = self.binary_distribution()
            cdf = np.cumsum(probs)
            picks = np.searchsorted(cdf / cdf[-1], rng.random(draws), side="right")
            return values[np.minimum(picks, values.size - 1)]
        shuffled = rng.permuted(np.broadcast_to(self.pooled, (draws, n)), axis=1)
        return self.value(np.asarray(shuffled[:, :r].sum(axis=1), dtype=np.float64))

    def support_size(self) -> int:
        """How many values :meth:`exact_distribution` would return (an upper bound)."""
        n, r = self.n, self.n_candidate
        if self.binary:
            good = int(self.pooled.sum())
            return min(r, good) - max(0, r - (n - good)) + 1
        return math.comb(n, r)


def _terms(
    base: TaskSamples, candidate: TaskSamples, statistic: Statistic
) -> list[_Term]:
    terms: list[_Term] = []
    for t in base.tasks:
        cand = np.asarray(candidate.rewards[t], dtype=np.float64)
        pooled = np.concatenate([np.asarray(base.rewards[t], dtype=np.float64), cand])
        if np.ptp(pooled) == 0.0:
            continue  # every reshuffle gives the same data: no information, no noise
        terms.append(_Term(pooled, cand.size, base.weight(t), float(cand.sum()), statistic))
    return terms


def _merge(values: FloatArray, probs: FloatArray) -> tuple[FloatArray, FloatArray]:
    keys, inverse = np.unique(np.round(values, _ROUND), return_inverse=True)
    merged = np.bincount(inverse.ravel(), weights=probs.ravel()).astype(np.float64)
    return keys, merged


def _support_bound(terms: list[_Term]) -> int:
    """An upper bound on the number of distinct values of the summed score.

    Identical terms (same pooled outcomes, repeats, weight) sum to a value set
    counted by multisets, which keeps a suite of many alike tasks enumerable;
    the mean-difference score of pass/fail tasks with a common step lives on a
    lattice, whose size only grows additively.
    """
    steps = {t.weight * (1.0 / t.n_candidate + 1.0 / (t.n - t.n_candidate)) for t in terms}
    if terms[0].statistic == "mean-difference" and len(steps) == 1 and all(
        t.binary for t in terms
    ):
        return sum(t.support_size() - 1 for t in terms) + 1
    groups: dict[tuple[object, ...], list[_Term]] = {}
    for term in terms:
        groups.setdefault(term.key(), []).append(term)
    bound = 1
    for members in groups.values():
        m = members[0].support_size()
        bound *= math.comb(len(members) + m - 1, len(members))
    return bound


def _exact(terms: list[_Term]) -> tuple[FloatArray, FloatArray]:
    values: FloatArray = np.zeros(1)
    probs: FloatArray = np.ones(1)
    for term in terms:
        tv, tp = term.exact_distribution()
        values, probs = _merge(
            (values[:, None] + tv[None, :]).ravel(), (probs[:, None] * tp[None, :]).ravel()
        )
    return values, probs


def permutation_test(
    base: TaskSamples,
    candidate: TaskSamples,
    *,
    statistic: Statistic = "signed-square",
    permutations: int = 4000,
    seed: int = 0,
    exact_limit: int = 20_000,
) -> PermutationResult:
    """One-sided stratified permutation test of "the candidate scores higher".

    ``permutations`` reshuffles are sampled (seeded, so the same data give the
    same p-value) unless the exact distribution has at most ``exact_limit``
    distinct values, in which case it is enumerated.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}; choose one of {', '.join(STATISTICS)}")
    if permutations < 1:
        raise ValueError(f"permutations must be at least 1, got {permutations}")
    check_same_tasks(base, candidate)
    terms = _terms(base, candidate, statistic)
    if not terms:
        return PermutationResult(0.0, 1.0, exact=True, permutations=0)
    observed = float(sum(term.value(np.array([term.observed_sum]))[0] for term in terms))
    tolerance = _TIE * max(1.0, abs(observed))
    if _support_bound(terms) <= exact_limit:
        values, probs = _exact(terms)
        p = float(probs[values >= observed - tolerance].sum())
        return PermutationResult(observed, min(1.0, p), exact=True, permutations=0)
    rng = np.random.default_rng(seed)
    reshuffled = np.zeros(permutations)
    for term in terms:
        reshuffled += term.sample_values(rng, permutations)
    hits = int(np.count_nonzero(reshuffled >= observed - tolerance))
    return PermutationResult(
        observed, (1 + hits) / (permutations + 1), exact=False, permutations=permutations
    )
