"""Acceptance statistics: samples, the permutation test, posteriors and both policies."""

from __future__ import annotations

import math
import re
from itertools import combinations

import numpy as np
import pytest
from scipy import stats

from agentdescent_core.stats import (
    DEFAULT_REPEATS,
    PAIRS_PER_REPEAT,
    AcceptancePolicy,
    BetaPolicy,
    BettingPolicy,
    PairedPolicy,
    Sequential,
    TaskSamples,
    annealed_delta,
    baseline_repeats,
    find_flips,
    get_acceptance_policy,
    permutation_test,
    policy_for,
    pooled_improvement,
    posterior_improvement,
)


def runs(passes: int, fails: int) -> list[float]:
    return [1.0] * passes + [0.0] * fails


# --- samples -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rewards", "fragment"),
    [
        ({"t::a": [0.5, float("nan")]}, "'t::a': reward #1 is nan"),
        ({"t::a": [1.5]}, "'t::a': reward #0 is 1.5"),
        ({"t::a": [-0.1]}, "within [0, 1]"),
        ({"t::a": [float("inf")]}, "finite"),
        ({"t::a": []}, "'t::a' has no rewards"),
        ({"t::a": ["1"]}, "not a number"),
        ({"t::a": 1.0}, "expected a sequence"),
        ({}, "no tasks"),
    ],
)
def test_bad_rewards_are_refused_naming_the_task(rewards, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        TaskSamples(rewards)


def test_bad_weights_are_refused():
    with pytest.raises(ValueError, match="unknown task 't::b'"):
        TaskSamples({"t::a": [1.0]}, {"t::b": 2.0})
    with pytest.raises(ValueError, match="'t::a': weight 0"):
        TaskSamples({"t::a": [1.0]}, {"t::a": 0})
    with pytest.raises(ValueError, match="'t::a': weight nan"):
        TaskSamples({"t::a": [1.0]}, {"t::a": float("nan")})


def test_samples_are_normalised_and_immutable():
    s = TaskSamples({"t::b": [True, False], "t::a": [1, 0.5]}, {"t::b": 3})
    assert s.tasks == ("t::a", "t::b")
    assert s.rewards["t::b"] == (1.0, 0.0)
    assert s.weight("t::a") == 1.0
    assert s.weight("t::b") == 3.0
    assert s.reward() == pytest.approx((0.75 + 3 * 0.5) / 4)
    assert (s.min_repeats, s.evaluations) == (2, 4)
    with pytest.raises(TypeError):
        s.rewards["t::a"] = (0.0,)  # type: ignore[index]


def test_extended_appends_repeats_and_checks_tasks():
    s = TaskSamples({"a": [1.0], "b": [0.0]}).extended(TaskSamples({"a": [0.0], "b": [1.0]}))
    assert s.rewards == {"a": (1.0, 0.0), "b": (0.0, 1.0)}
    with pytest.raises(ValueError, match="missing b"):
        s.extended(TaskSamples({"a": [1.0]}))


def test_comparing_different_task_lists_or_weights_is_refused():
    base = TaskSamples({"a": [1.0], "b": [1.0]})
    with pytest.raises(ValueError, match="missing b; unknown to the base c"):
        PairedPolicy().decide(base, TaskSamples({"a": [1.0] * 3, "c": [1.0] * 3}))
    with pytest.raises(ValueError, match=r"'a' weighs 1\.0 for the base but 2\.0"):
        permutation_test(base, TaskSamples({"a": [1.0], "b": [1.0]}, {"a": 2.0}))


def test_flips_follow_the_majority_verdict():
    base = TaskSamples({"a": runs(0, 5), "b": runs(5, 0), "c": runs(3, 2), "d": runs(1, 4)})
    cand = TaskSamples({"a": runs(3, 0), "b": runs(1, 2), "c": runs(2, 1), "d": runs(1, 2)})
    flips = find_flips(base, cand)
    assert [(f.nodeid, f.kind) for f in flips] == [("a", "fail->pass"), ("b", "pass->fail")]
    assert flips[1].before == 1.0
    assert flips[1].after == pytest.approx(1 / 3)


# --- the permutation test -----------------------------------------------------------------


def test_one_fixed_task_on_a_deterministic_suite_is_exact():
    # base 0/5 vs candidate 3/3 on one task, every other task constant: 1 / C(8, 3).
    base = TaskSamples({"fixed": runs(0, 5), "ok": runs(5, 0), "bad": runs(0, 5)})
    cand = TaskSamples({"fixed": runs(3, 0), "ok": runs(3, 0), "bad": runs(0, 3)})
    for statistic in ("signed-square", "mean-difference"):
        result = permutation_test(base, cand, statistic=statistic)
        assert result.exact
        assert result.p_value == pytest.approx(1 / math.comb(8, 3))


def test_nothing_varies_means_no_evidence():
    base = TaskSamples({"a": runs(5, 0), "b": runs(0, 5)})
    cand = TaskSamples({"a": runs(3, 0), "b": runs(0, 3)})
    result = permutation_test(base, cand)
    assert (result.p_value, result.statistic, result.exact) == (1.0, 0.0, True)


def brute_force_p(base: TaskSamples, cand: TaskSamples) -> float:
    """Every relabelling of every task, scored with sum(w * z * |z|) written out longhand."""
    per_task = []
    observed = 0.0
    for t in base.tasks:
        pooled = [*base.rewards[t], *cand.rewards[t]]
        weight = base.weight(t)
        n, r = len(pooled), len(cand.rewards[t])
        mean = sum(pooled) / n
        var = sum((x - mean) ** 2 for x in pooled) / n * (n - r) / (n - 1) / r
        if var == 0:
            continue

        def score(chosen: tuple[float, ...], var: float = var, mean: float = mean, r: int = r,
                  weight: float = weight) -> float:
            z = (sum(chosen) / r - mean) / math.sqrt(var)
            return weight * z * abs(z)

        per_task.append([score(c) for c in combinations(pooled, r)])
        observed += score(tuple(cand.rewards[t]))
    totals = [0.0]
    for scores in per_task:
        totals = [a + b for a in totals for b in scores]
    return sum(1 for x in totals if x >= observed - 1e-9) / len(totals)


def test_graded_rewards_match_brute_force_enumeration():
    base = TaskSamples({"a": [0.2, 0.5, 0.1, 0.4], "b": [1.0, 0.0, 1.0, 1.0]}, {"b": 2.0})
    cand = TaskSamples({"a": [0.6, 0.7], "b": [1.0, 1.0]}, {"b": 2.0})
    result = permutation_test(base, cand)
    assert result.exact
    assert result.p_value == pytest.approx(brute_force_p(base, cand))


def test_sampled_p_value_agrees_with_exact_and_is_reproducible():
    rng = np.random.default_rng(5)
    # two graded tasks of 6 + 3 runs: 84 * 84 relabellings, small enough to enumerate
    base = TaskSamples({f"t{i}": rng.random(6).round(2).tolist() for i in range(2)})
    cand = TaskSamples({f"t{i}": (rng.random(3) * 0.5 + 0.4).round(2).tolist() for i in range(2)})
    exact = permutation_test(base, cand)
    sampled = permutation_test(base, cand, exact_limit=0, permutations=20_000, seed=3)
    assert exact.exact
    assert not sampled.exact
    assert sampled.p_value == pytest.approx(exact.p_value, abs=0.01)
    again = permutation_test(base, cand, exact_limit=0, permutations=20_000, seed=3)
    assert again.p_value == sampled.p_value


def test_sampled_p_value_never_reaches_zero():
    base = TaskSamples({f"t{i}": runs(0, 30) for i in range(3)} | {"x": runs(15, 15)})
    cand = TaskSamples({f"t{i}": runs(30, 0) for i in range(3)} | {"x": runs(15, 15)})
    result = permutation_test(base, cand, exact_limit=0, permutations=999)
    assert result.p_value == pytest.approx(1 / 1000)


def test_p_values_are_valid_under_the_null():
    # Flaky tasks, nothing changes: P(p <= a) must not exceed a (exactness of the test).
    rng = np.random.default_rng(11)
    ps = []
    for _ in range(300):
        base = TaskSamples({f"t{i}": (rng.random(8) < 0.6).tolist() for i in range(6)})
        cand = TaskSamples({f"t{i}": (rng.random(4) < 0.6).tolist() for i in range(6)})
        ps.append(permutation_test(base, cand, permutations=500).p_value)
    arr = np.array(ps)
    for a in (0.05, 0.1, 0.25, 0.5):
        # one-sided binomial margin: fails only if the rate is clearly above a
        hits = int((arr <= a).sum())
        assert stats.binomtest(hits, arr.size, a, alternative="greater").pvalue > 1e-3


def test_unknown_statistic_is_refused():
    s = TaskSamples({"a": [1.0]})
    with pytest.raises(ValueError, match="choose one of signed-square, mean-difference"):
        permutation_test(s, s, statistic="max")  # type: ignore[arg-type]


# --- posteriors ---------------------------------------------------------------------------


def test_posterior_improvement_reads_the_direction():
    same = TaskSamples({f"t{i}": runs(3, 3) for i in range(5)})
    assert posterior_improvement(same, same) == pytest.approx(0.5, abs=0.05)
    worse = TaskSamples({f"t{i}": runs(1, 5) for i in range(5)})
    better = TaskSamples({f"t{i}": runs(5, 1) for i in range(5)})
    assert posterior_improvement(worse, better) > 0.99
    assert posterior_improvement(better, worse) < 0.01
    assert posterior_improvement(worse, better, seed=4) == posterior_improvement(
        worse, better, seed=4
    )


def test_posterior_improvement_uses_the_weights():
    base = TaskSamples({"heavy": runs(6, 0), "light": runs(0, 6)}, {"heavy": 9.0})
    cand = TaskSamples({"heavy": runs(0, 6), "light": runs(6, 0)}, {"heavy": 9.0})
    assert posterior_improvement(base, cand) < 0.01


def test_pooled_improvement_matches_sampling():
    base = TaskSamples({"a": runs(12, 8), "b": runs(3, 7)})
    cand = TaskSamples({"a": runs(8, 2), "b": runs(3, 2)})
    rng = np.random.default_rng(0)
    tb = rng.beta(15 + 1, 15 + 1, size=400_000)
    tc = rng.beta(11 + 1, 4 + 1, size=400_000)
    assert pooled_improvement(base, cand) == pytest.approx(float(np.mean(tc > tb)), abs=0.003)
    # symmetric counts are a coin flip; a better candidate is believed better
    assert pooled_improvement(base, base) == pytest.approx(0.5, abs=1e-9)


def test_annealed_delta_schedule():
    assert annealed_delta(0) == 0.5
    assert annealed_delta(64) == pytest.approx(0.25)
    assert annealed_delta(128) == pytest.approx(0.125)
    assert annealed_delta(10_000) == 0.01
    with pytest.raises(ValueError, match="version must be >= 0"):
        annealed_delta(-1)


# --- the default policy --------------------------------------------------------------------


def test_defaults_and_registry():
    assert DEFAULT_REPEATS == 2
    assert baseline_repeats(2) == 24
    assert baseline_repeats() == baseline_repeats(DEFAULT_REPEATS)
    with pytest.raises(ValueError, match="at least 1"):
        baseline_repeats(0)
    default = get_acceptance_policy()
    assert isinstance(default, BettingPolicy)
    assert isinstance(default, AcceptancePolicy)
    assert isinstance(default, Sequential)
    assert default.alpha == pytest.approx(0.05)
    assert policy_for("betting", 2).repeats == PAIRS_PER_REPEAT * 2  # type: ignore[attr-defined]
    assert policy_for("paired", 3).looks == (3, 6, 9)  # type: ignore[attr-defined]
    policy = get_acceptance_policy("paired")
    assert isinstance(policy, PairedPolicy)
    assert not isinstance(policy, Sequential)
    assert policy.looks == (2, 4, 6)
    assert policy.alpha == pytest.approx(0.035)
    assert PairedPolicy(repeats=3, look_alphas=(0.01, 0.02)).looks == (3, 6)
    assert isinstance(get_acceptance_policy("beta", half_life=10), BetaPolicy)
    with pytest.raises(ValueError, match="valid policies: beta, betting, paired"):
        get_acceptance_policy("threshold")
    with pytest.raises(ValueError, match="bad option for acceptance policy 'paired'"):
        get_acceptance_policy("paired", nonsense=1)
    with pytest.raises(ValueError, match="look_alphas"):
        PairedPolicy(look_alphas=(0.5, 0.6))


def deterministic_suite(fixed: bool, base_repeats: int = 24, repeats: int = 2):
    tasks = {f"t{i:02d}": i < 12 for i in range(20)}  # 12 pass, 8 fail, always
    base = TaskSamples({t: runs(base_repeats, 0) if ok else runs(0, base_repeats)
                        for t, ok in tasks.items()})
    cand = TaskSamples({t: runs(repeats, 0) if ok or (fixed and t == "t12") else runs(0, repeats)
                        for t, ok in tasks.items()})
    return base, cand


def test_one_fix_on_a_deterministic_suite_is_committed_at_the_first_look():
    base, cand = deterministic_suite(fixed=True)
    d = PairedPolicy().decide(base, cand)
    assert d.accept
    assert (d.category, d.more_repeats) == ("committed", 0)
    assert d.p_value == pytest.approx(1 / math.comb(26, 2))
    assert d.threshold == 0.005
    assert [(f.nodeid, f.kind) for f in d.flips] == [("t12", "fail->pass")]
    assert (d.reward_base, d.reward_candidate) == (0.6, 0.65)
    assert d.reason.startswith("p=0.00308 <= 0.005 at look 1/3 (2 repeats); reward 0.600 -> 0.650")
    assert d.reason.endswith("1 fail->pass, 0 pass->fail")


def test_an_unchanged_deterministic_candidate_is_rejected():
    base, cand = deterministic_suite(fixed=False)
    d = PairedPolicy().decide(base, cand)
    assert not d.accept
    assert d.category == "below-threshold"
    assert (d.p_value, d.more_repeats, d.flips) == (1.0, 0, [])


def test_a_short_baseline_is_made_up_by_later_looks():
    # With 3 base repeats: 2/2 vs 0/3 gives p = 1/10, 4/4 gives 1/35, 6/6 gives 1/84.
    base, cand = deterministic_suite(fixed=True, base_repeats=3)
    _, more = deterministic_suite(fixed=True, base_repeats=3)
    policy = PairedPolicy()
    first = policy.decide(base, cand)
    assert (first.accept, first.more_repeats, first.threshold) == (False, 2, 0.005)
    assert first.p_value == pytest.approx(1 / 10)
    assert "at look 1/3 (2 repeats) but promising" in first.reason
    assert "evaluate 2 more repeats per task" in first.reason
    cand = cand.extended(more)
    second = policy.decide(base, cand)
    assert (second.accept, second.more_repeats, second.threshold) == (False, 2, 0.01)
    assert second.p_value == pytest.approx(1 / math.comb(7, 4))
    cand = cand.extended(more)
    third = policy.decide(base, cand)
    assert third.accept
    assert third.threshold == 0.02
    assert third.p_value == pytest.approx(1 / math.comb(9, 6))
    # past the last look, the last look's alpha applies and nothing more is asked
    beyond = policy.decide(base, cand.extended(more))
    assert (beyond.threshold, beyond.more_repeats) == (0.02, 0)


def test_too_few_candidate_repeats_asks_for_the_first_look():
    base, cand = deterministic_suite(fixed=True, repeats=1)
    d = PairedPolicy().decide(base, cand)
    assert (d.accept, d.more_repeats, d.p_value) == (False, 1, None)
    assert "first look needs 2 candidate repeats per task, has 1" in d.reason


def test_a_regression_that_outweighs_the_gain_is_not_committed():
    # One task fixed outright (strong evidence) while four flaky ones drop from 2/3 to 1/3
    # (weak evidence each): the score is clearly positive, yet the mean reward went down.
    base = TaskSamples({"fixed": runs(0, 18)} | {f"r{i}": runs(12, 6) for i in range(4)})
    cand = TaskSamples({"fixed": runs(3, 0)} | {f"r{i}": runs(1, 2) for i in range(4)})
    d = PairedPolicy().decide(base, cand)
    assert d.reward_candidate < d.reward_base
    assert not d.accept
    assert d.p_value is not None
    assert d.p_value <= d.threshold
    assert "the weighted mean reward did not rise" in d.reason
    assert [f.kind for f in d.flips] == ["fail->pass"] + ["pass->fail"] * 4


def test_a_broken_task_is_listed_even_when_committed():
    base = TaskSamples({f"f{i}": runs(0, 18) for i in range(3)} | {"b": runs(18, 0)})
    cand = TaskSamples({f"f{i}": runs(3, 0) for i in range(3)} | {"b": runs(0, 3)})
    d = PairedPolicy().decide(base, cand)
    assert d.accept
    assert [f.nodeid for f in d.regressions] == ["b"]
    assert len(d.fixes) == 3
    assert d.reason.endswith("3 fail->pass, 1 pass->fail")


def test_decisions_are_reproducible():
    rng = np.random.default_rng(2)
    base = TaskSamples({f"t{i}": (rng.random(18) < 0.5).tolist() for i in range(20)})
    cand = TaskSamples({f"t{i}": (rng.random(3) < 0.7).tolist() for i in range(20)})
    assert PairedPolicy().decide(base, cand) == PairedPolicy().decide(base, cand)


# --- the reference policy ------------------------------------------------------------------


def test_beta_policy_accepts_on_a_coin_flip_at_version_zero():
    base = TaskSamples({"a": runs(10, 10)})
    cand = TaskSamples({"a": runs(6, 4)})
    d = BetaPolicy().decide(base, cand, version=0)
    assert d.accept
    assert (d.threshold, d.p_value) == (0.5, None)
    assert 0.5 < d.p_improvement < 0.9
    assert "(delta=0.5 at version 0)" in d.reason
    later = BetaPolicy().decide(base, cand, version=1000)
    assert not later.accept
    assert later.threshold == pytest.approx(0.99)


def test_beta_policy_regression_guard():
    base = TaskSamples({"a": runs(6, 4), "b": runs(1, 9)})
    cand = TaskSamples({"a": runs(5, 5), "b": runs(1, 9)})  # pooled 7/20 -> 6/20
    d = BetaPolicy(base_delta=0.9).decide(base, cand)
    assert not d.accept
    assert "pooled pass rate fell 0.350 -> 0.300 (regression guard)" in d.reason


def test_posterior_improvement_compares_on_equal_evidence():
    # The base is measured with 24 repeats, the candidate with 2: a task both
    # always pass must not make the better-measured base look better.
    tasks = [f"t{i}" for i in range(18)]
    base = TaskSamples({t: [1.0] * 24 for t in tasks[:-1]} | {tasks[-1]: [0.0] * 24})
    fixed = TaskSamples({t: [1.0, 1.0] for t in tasks})
    assert posterior_improvement(base, fixed) > 0.9
    same = TaskSamples({t: [1.0, 1.0] for t in tasks[:-1]} | {tasks[-1]: [0.0, 0.0]})
    assert 0.3 < posterior_improvement(base, same) < 0.7
