"""What flows from workers to the aggregator, and what the aggregator reports back.

A worker turns a failure into an :class:`EvidenceCard` (the proposed Diff plus
what it was proposed against and why); the aggregator turns cards into
:class:`MergeReport` s, one per merge decision, each with a stable
:class:`MergeOutcome` category that results and reports count on, and a
human-readable reason carrying the measured values.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.stats.samples import Flip


class MergeOutcome(str, enum.Enum):
    """Why a merge decision went the way it did (the ``outcomes()`` vocabulary)."""

    COMMITTED = "committed"
    """Accepted and written to the dev branch."""
    BELOW_THRESHOLD = "below-threshold"
    """Reached the acceptance test and did not beat the base."""
    ALL_STALE = "all-stale"
    """Every card was too stale for the staleness policy (or failed its re-verify)."""
    OVERSIZED = "oversized"
    """Outside the trust region: too many files/keys, or a value too long."""
    INVALID_PROPOSAL = "invalid-proposal"
    """The proposal could not become a valid Diff (bad path, bad shape, ...)."""
    FROZEN_VIOLATION = "frozen-violation"
    """The change touched a frozen path."""
    GUARD_FAILED = "guard-failed"
    """A guard task that passed on the base failed on the candidate."""
    CAS_CONFLICT = "cas-conflict"
    """Lost the compare-and-swap on dev; the evidence is re-filed for retry."""
    ORACLE_REJECTED = "oracle-rejected"
    """The audit's oracle disagreed with the cheap evaluation."""
    UNKNOWN_ARTIFACT = "unknown-artifact"
    """The card targeted an artifact id the engine does not hold."""
    SECTION_VIOLATION = "section-violation"
    """Tensor parallelism: a worker edited a key outside its own section."""
    SECRET = "secret"
    """The proposal contains a secret (a token, a private key, a secret variable's value)."""
    TAMPER = "tamper"
    """The candidate's run reached past its tests: it changed the user's ``.git`` or the
    state directory, or code under the artifact roots reached into the test process
    (frames, the recorder, ctypes).  Never a reward."""

    def __str__(self) -> str:
        return self.value


MERGE_CATEGORIES: tuple[str, ...] = tuple(outcome.value for outcome in MergeOutcome)


@dataclass(frozen=True)
class EvidenceCard:
    """One worker's proposal, with what it was proposed against and why.

    ``diff`` is in the strategy's key space (for a FileTree: repo-relative
    paths) and ``diff.base_version`` is the ledger version the worker read, from
    which staleness is measured.  ``tasks`` are the train tasks whose failures
    motivated it (re-verification and conflict resolution score on them).
    ``before`` / ``after`` are the worker's own reward on ``tasks`` without and
    with the diff (self-verify), when it measured them.  ``contract_breaking``
    may be set by whoever files the card; the aggregator also sets it when the
    strategy's ``breaks_contract`` says so.  ``allowed_keys`` is set under
    tensor parallelism: the keys of the worker's section.
    """

    diff: Diff
    worker: str
    round: int
    tasks: tuple[str, ...] = ()
    before: float | None = None
    after: float | None = None
    contract_breaking: bool = False
    allowed_keys: frozenset[str] | None = None

    @property
    def artifact_id(self) -> str:
        return self.diff.target

    @property
    def base_version(self) -> int:
        return self.diff.base_version


@dataclass(frozen=True)
class MergeReport:
    """One merge decision of the aggregator.

    ``category`` is a :class:`MergeOutcome` value; ``reason`` is for people and
    interpolates the measured numbers, so count on ``category``.  When
    ``category`` is ``committed``, ``diff`` is what was committed (possibly a
    fusion of several cards, then ``fused`` is True), ``version`` / ``sha`` the
    new dev head.  The counters say how the decision got there: cards
    ``considered``, ``discarded_stale`` by the staleness filter,
    ``conflicts_dropped`` by conflict resolution.
    """

    artifact_id: str
    category: str
    reason: str
    diff: Diff | None = None
    version: int | None = None
    sha: str | None = None
    considered: int = 0
    discarded_stale: int = 0
    conflicts_dropped: int = 0
    fused: bool = False
    p_improvement: float | None = None
    reward_before: float | None = None
    reward_after: float | None = None
    flips: tuple[Flip, ...] = ()
    evaluations: int = 0
    extra: Mapping[str, object] = field(default_factory=dict)

    @property
    def committed(self) -> bool:
        return self.category == MergeOutcome.COMMITTED.value
