"""The aggregator's knobs, one frozen value so a run's configuration can be recorded."""

from __future__ import annotations

from dataclasses import dataclass

from agentdescent_core.stats.policies import (
    DEFAULT_POLICY,
    DEFAULT_REPEATS,
    POLICIES,
    baseline_repeats,
)

TOURNAMENTS: tuple[str, ...] = ("full", "union-first")


@dataclass(frozen=True)
class AggregatorConfig:
    """How the aggregator batches, verifies, audits and promotes.

    A bucket of cards fires when it holds ``batch_size`` cards or when its
    oldest card has waited ``t_max`` rounds (so a rarely touched artifact is not
    starved).  ``acceptance`` names the policy (default ``betting``).  With
    ``betting``, ``repeats`` (``--evolve-repeats``) sets the pair budget,
    ``PAIRS_PER_REPEAT * repeats`` pairs per task on average, and the base is
    evaluated once per task up front (more only where pairs need it); with
    ``paired``, candidates are measured at ``repeats`` per task at the first
    look and the base at ``baseline_repeats`` (default
    :func:`agentdescent_core.stats.baseline_repeats`).  ``alpha_head`` /
    ``alpha_tail`` are the staleness tolerances of L1 / L2 artifacts.  A
    candidate changing more than ``trust_region_ops`` keys, or any value
    longer than ``trust_region_chars``, is ``oversized``.  Dev is promoted to
    stable after ``promote_after`` rounds without a change in which its
    guards held.  The audit gate spends at most ``oracle_budget`` oracle calls
    and forces one whenever the cheap signal's measured trust is below
    ``trust_floor``; the cheap signal scores ``cheap_eval_tasks`` eval tasks
    (None: the tasks named on the cards).  ``fusion`` turns the fused-union
    candidate of the tournament on or off.  ``tournament`` says how the fused
    union competes with its parts: ``"union-first"`` (the default) scores the
    union first and sends it on when it beats the head, scoring the parts only
    when it does not (2 evaluations when the parts are complementary, which is
    the common case; see ``docs/performance.md``), and with a sequential
    acceptance policy drops the parts of an accepted union that its own pairs
    do not support; ``"full"`` scores every entrant on the eval tasks and keeps
    the best ((k + 1) evaluations of the eval set for k proposals).  The
    acceptance test judges the winner either way.
    ``oracle_repeats`` is how many repeats per task the full-evaluation oracle
    uses (None: the baseline's).
    ``base_delta`` is the starting tolerance of the ``beta`` policy (its
    ``delta`` at version 0, annealed from there; None: the policy's 0.5); it
    exists only for ``acceptance="beta"`` and is refused with any other policy,
    where it would do nothing.
    """

    batch_size: int = 1
    t_max: int = 1
    repeats: int = DEFAULT_REPEATS
    baseline_repeats: int | None = None
    acceptance: str = DEFAULT_POLICY
    alpha_head: int = 5
    alpha_tail: int = 1
    trust_region_ops: int = 20
    trust_region_chars: int = 64_000
    promote_after: int = 3
    oracle_budget: int = 200
    cheap_eval_tasks: int | None = None
    trust_floor: float = 0.8
    fusion: bool = True
    oracle_repeats: int | None = None
    tournament: str = "union-first"
    base_delta: float | None = None

    def __post_init__(self) -> None:
        positive = {
            "batch_size": self.batch_size,
            "repeats": self.repeats,
            "trust_region_ops": self.trust_region_ops,
            "trust_region_chars": self.trust_region_chars,
        }
        non_negative = {
            "t_max": self.t_max,
            "alpha_head": self.alpha_head,
            "alpha_tail": self.alpha_tail,
            "promote_after": self.promote_after,
            "oracle_budget": self.oracle_budget,
        }
        optional_positive = {
            "baseline_repeats": self.baseline_repeats,
            "cheap_eval_tasks": self.cheap_eval_tasks,
            "oracle_repeats": self.oracle_repeats,
        }
        for name, value in positive.items():
            _require_int(name, value, minimum=1)
        for name, value in non_negative.items():
            _require_int(name, value, minimum=0)
        for name, opt in optional_positive.items():
            if opt is not None:
                _require_int(name, opt, minimum=1)
        if not 0.0 <= float(self.trust_floor) <= 1.0:
            raise ValueError(
                f"AggregatorConfig.trust_floor must be in [0, 1], got {self.trust_floor!r}"
            )
        if self.tournament not in TOURNAMENTS:
            raise ValueError(
                f"AggregatorConfig.tournament={self.tournament!r} is not known; "
                f"use one of {', '.join(TOURNAMENTS)}"
            )
        if self.base_delta is not None:
            _check_base_delta(self.base_delta, self.acceptance)
        if self.acceptance not in POLICIES:
            raise ValueError(
                f"AggregatorConfig.acceptance={self.acceptance!r} is not a known policy; "
                f"use one of {', '.join(sorted(POLICIES))} or pass acceptance_policy="
            )

    @property
    def sequential(self) -> bool:
        """True when the acceptance policy buys pairs itself (``betting``)."""
        return self.acceptance == "betting"

    @property
    def base_repeats(self) -> int:
        """Repeats the base (the dev head) is evaluated with up front.

        With ``betting`` one: the screen's base run of each task; the pairs
        after it draw further base runs only where they are needed.
        """
        if self.baseline_repeats is not None:
            return self.baseline_repeats
        if self.sequential:
            return 1
        return baseline_repeats(self.repeats)

    @property
    def score_repeats(self) -> int:
        """Repeats per task behind a score (tournament, re-verification, cheap layer).

        With ``betting`` one, the run its screen pairs reuse; otherwise ``repeats``.
        """
        return 1 if self.sequential else self.repeats

    @property
    def audit_repeats(self) -> int:
        """Repeats per task of the full-evaluation oracle."""
        return self.oracle_repeats if self.oracle_repeats is not None else self.base_repeats


def _require_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(
            f"AggregatorConfig.{name} must be an integer >= {minimum}, got {value!r}"
        )


def _check_base_delta(value: object, acceptance: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise ValueError(
            f"AggregatorConfig.base_delta must be a number in (0, 1], got {value!r}"
        )
    if acceptance != "beta":
        raise ValueError(
            f"AggregatorConfig.base_delta={value!r} tunes the 'beta' acceptance policy, but "
            f"acceptance={acceptance!r}; pass acceptance='beta' with it, or drop base_delta"
        )
