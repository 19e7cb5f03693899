"""Beta posteriors: the P(improvement) shown in reports and the reference rule's numbers.

A task's pass rate after ``s`` passes and ``f`` failures, starting from a flat
prior, is believed to be Beta(1 + s, 1 + f).  Graded rewards count as
fractional passes (a reward of 0.7 adds 0.7 to ``s`` and 0.3 to ``f``).

Two questions are asked of these posteriors:

* :func:`posterior_improvement` — per task, then weighted like the reward:
  "how sure are we that the candidate's weighted mean reward is higher than
  the base's?"  This is the number the reports print as P(improvement); it is
  a summary for people, the decision is the permutation test's.
* :func:`pooled_improvement` — all tasks and repeats thrown into one pot, as
  the reference design's rule does (see :class:`~agentdescent_core.stats.policies.BetaPolicy`).
"""

from __future__ import annotations

import math

import numpy as np

from agentdescent_core.stats.samples import TaskSamples, check_same_tasks


def _task_counts(samples: TaskSamples) -> tuple[np.ndarray, np.ndarray]:
    passes = np.array([math.fsum(samples.rewards[t]) for t in samples.tasks])
    runs = np.array([samples.repeats(t) for t in samples.tasks], dtype=np.float64)
    return passes, runs - passes


def posterior_improvement(
    base: TaskSamples, candidate: TaskSamples, *, draws: int = 2000, seed: int = 0
) -> float:
    """P(weighted mean pass rate of the candidate > that of the base), by posterior sampling.

    Each task has its own Beta posterior for each version, on equal evidence
    (both sides' counts scaled to the smaller number of runs).  The comparison
    is paired: a task with the same evidence on both sides cancels out, so
    P(improvement) is about the tasks that changed (identical versions: 0.5).  Seeded:
    the same samples always give the same number (Monte Carlo error about
    ``0.5 / sqrt(draws)`` at worst).
    """
    check_same_tasks(base, candidate)
    if draws < 1:
        raise ValueError(f"draws must be at least 1, got {draws}")
    rng = np.random.default_rng(seed)
    weights = np.array([base.weight(t) for t in base.tasks])
    weights = weights / weights.sum()
    sb, fb = _task_counts(base)
    sc, fc = _task_counts(candidate)
    # Compare on equal evidence: the base is usually measured with many more
    # repeats than a candidate, and a task both always pass would otherwise
    # look better-known, hence better, on the base side.  Each side's counts
    # keep their rate but are scaled to the smaller number of runs per task.
    nb, nc = sb + fb, sc + fc
    runs = np.minimum(nb, nc)
    scale_b = np.divide(runs, nb, out=np.zeros_like(runs), where=nb > 0)
    scale_c = np.divide(runs, nc, out=np.zeros_like(runs), where=nc > 0)
    sb, fb, sc, fc = sb * scale_b, fb * scale_b, sc * scale_c, fc * scale_c
    # Paired: a task with the same evidence on both sides has the same posterior,
    # so it moves both weighted means alike and cancels; only the tasks whose
    # evidence differs are drawn (independently per side).
    differ = ~(np.isclose(sb, sc) & np.isclose(fb, fc))
    if not differ.any():
        return 0.5
    w = weights[differ]
    theta_b = rng.beta(1.0 + sb[differ], 1.0 + fb[differ], size=(draws, int(differ.sum()))) @ w
    theta_c = rng.beta(1.0 + sc[differ], 1.0 + fc[differ], size=(draws, int(differ.sum()))) @ w
    return float(np.mean(theta_c > theta_b))


def pooled_counts(samples: TaskSamples) -> tuple[float, float]:
    """(successes, failures) over every task and repeat, ignoring weights."""
    passes, fails = _task_counts(samples)
    return float(passes.sum()), float(fails.sum())


def pooled_improvement(base: TaskSamples, candidate: TaskSamples, *, nodes: int = 4097) -> float:
    """P(theta_candidate > theta_base) for pooled Beta(s + 1, f + 1) posteriors.

    The integral of the base's density times the candidate's survival
    function, by Simpson's rule (scipy) on ``nodes`` points spanning where
    either posterior has mass; both densities are bounded and smooth there,
    so this is accurate to far below the two decimals reports print, and
    deterministic, unlike sampling.
    """
    from scipy import integrate, stats  # here: scipy.stats costs a second to import

    check_same_tasks(base, candidate)
    sb, fb = pooled_counts(base)
    sc, fc = pooled_counts(candidate)
    a_b, b_b, a_c, b_c = sb + 1.0, fb + 1.0, sc + 1.0, fc + 1.0
    tail = 1e-14
    lo = min(stats.beta.ppf(tail, a_b, b_b), stats.beta.ppf(tail, a_c, b_c))
    hi = max(stats.beta.isf(tail, a_b, b_b), stats.beta.isf(tail, a_c, b_c))
    x = np.linspace(float(lo), float(hi), nodes)
    integrand = stats.beta.pdf(x, a_b, b_b) * stats.beta.sf(x, a_c, b_c)
    value = float(integrate.simpson(integrand, x=x))
    return min(1.0, max(0.0, value))


def annealed_delta(
    version: int, *, base_delta: float = 0.5, half_life: float = 64.0, floor: float = 0.01
) -> float:
    """The reference rule's tolerance: ``max(floor, base_delta * 0.5 ** (version / half_life))``.

    Like a decaying learning rate: early versions are accepted on thin
    evidence, later ones must be ever more convincing.
    """
    if version < 0:
        raise ValueError(f"version must be >= 0, got {version}")
    if half_life <= 0:
        raise ValueError(f"half_life must be positive, got {half_life}")
    return float(max(floor, base_delta * 0.5 ** (version / half_life)))
